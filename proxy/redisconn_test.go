package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	"flashgate/conf"
	"flashgate/internal/proctest"
	"flashgate/internal/redistest"
	"flashgate/internal/tlstest"
	"flashgate/orders/stock"
)

// The redis section as an operator writes it for a production Redis — an
// ACL user and TLS with a private CA and a client certificate, secrets from
// the environment — reaches the server.
func TestOpenStockWithACLUserAndTLS(t *testing.T) {
	srv := redistest.New(t)
	admin := redistest.Client(t, srv.Addr())
	certs := tlstest.New(t)
	port, err := proctest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, cmd := range [][]string{
		{"ACL", "SETUSER", "edge", "on", ">edge-secret-pw", "~sk:*", "&sk:*", "+@all"},
		{"CONFIG", "SET", "tls-cert-file", certs.ServerCert, "tls-key-file", certs.ServerKey,
			"tls-ca-cert-file", certs.CA, "tls-auth-clients", "yes"},
		{"CONFIG", "SET", "tls-port", strconv.Itoa(port)},
	} {
		if err := admin.Do(ctx, admin.B().Arbitrary(cmd...).Build()).Error(); err != nil {
			t.Fatalf("%v: %v", cmd[:2], err)
		}
	}
	t.Setenv("FLASHGATE_TEST_REDIS_USER", "edge")
	t.Setenv("FLASHGATE_TEST_REDIS_PW", "edge-secret-pw")
	doc, err := conf.Parse([]byte("redis:\n  addr: \""+net.JoinHostPort("127.0.0.1", strconv.Itoa(port))+"\"\n"+
		"  username: env:FLASHGATE_TEST_REDIS_USER\n  password: env:FLASHGATE_TEST_REDIS_PW\n"+
		"  tls:\n    ca_file: "+certs.CA+"\n    cert_file: "+certs.ClientCert+"\n    key_file: "+certs.ClientKey+"\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := openStock(ctx, doc.Config, log, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.PutCatalog(ctx, "p1", stock.CatalogEntry{Activity: `{"productId":"p1"}`, Version: 1}); err != nil {
		t.Fatal(err)
	}
	// The write came over TLS as the ACL user, not as the default user
	// on the plain port.
	clients, err := admin.Do(ctx, admin.B().ClientList().Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(clients, "user=edge") || !strings.Contains(clients, "laddr=127.0.0.1:"+strconv.Itoa(port)) {
		t.Fatalf("no client of user edge on the TLS port:\n%s", clients)
	}
}

func TestOpenStockErrorsHideURLPasswords(t *testing.T) {
	port, err := proctest.FreePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	doc, err := conf.Parse([]byte("redis:\n  addr: \"redis://edge:url-secret-pw@127.0.0.1:"+strconv.Itoa(port)+"\"\n  timeout: 100ms\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = openStock(context.Background(), doc.Config, slog.New(slog.NewTextHandler(io.Discard, nil)), false, nil)
	if err == nil || strings.Contains(err.Error(), "url-secret-pw") {
		t.Fatalf("openStock = %v", err)
	}
}

func TestRedactHidesRedisSecrets(t *testing.T) {
	var c conf.Config
	c.Redis.Addr = "rediss://edge:url-secret-pw@redis.internal:6380/0"
	c.Redis.Username = "edge"
	c.Redis.Password = "redis-secret-pw"
	c.Redis.Sentinel = conf.RedisSentinelConfig{MasterSet: "m", Addrs: []string{"s1:26379"}, Username: "watch", Password: "sentinel-secret-pw"}
	c.Redis.TLS.KeyFile = "/etc/flashgate/redis-key.pem"
	c.ClickHouse.Addr = "clickhouse://u:ch/secret-pw@ch:9000" // a / in the password: no valid URL, hidden all the same
	out, err := renderConfig(&c)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"url-secret-pw", "redis-secret-pw", "sentinel-secret-pw", "ch/secret-pw"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("%s shown:\n%s", secret, out)
		}
	}
	// What an operator needs to read a ticket stays.
	for _, keep := range []string{"rediss://REDACTED@redis.internal:6380/0", "username: edge", "master_set: m", "s1:26379", "username: watch", "/etc/flashgate/redis-key.pem"} {
		if !strings.Contains(string(out), keep) {
			t.Errorf("%q hidden:\n%s", keep, out)
		}
	}
}
