package chtest

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/tlstest"
)

// query runs SQL over the HTTP interface, enough to check the server
// without pulling the driver into this package.
func query(t *testing.T, s *Server, sql string) string {
	t.Helper()
	return queryWith(t, s, "", sql)
}

// queryWith runs SQL with settings (a URL query: "a=1&b=2").
func queryWith(t *testing.T, s *Server, settings, sql string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post("http://"+s.HTTPAddr()+"/?"+settings, "text/plain", strings.NewReader(sql))
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", sql, resp.StatusCode, b)
	}
	return strings.TrimSpace(string(b))
}

func TestStartQueryRestartKeepsData(t *testing.T) {
	s := New(t)
	t.Logf("clickhouse-server %s started in %v (native %s)", query(t, s, "SELECT version()"), s.StartTook(), s.Addr())
	query(t, s, "CREATE TABLE default.t (x UInt64) ENGINE = MergeTree ORDER BY x")
	query(t, s, "INSERT INTO default.t VALUES (1), (2), (3)")

	addr := s.Addr()
	s.Stop()
	if _, err := http.Get("http://" + s.HTTPAddr() + "/ping"); err == nil {
		t.Fatal("/ping answered after Stop")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart took %v", s.StartTook())
	if s.Addr() != addr {
		t.Fatalf("address changed across restart: %s -> %s", addr, s.Addr())
	}
	if got := query(t, s, "SELECT count() FROM default.t"); got != "3" {
		t.Fatalf("count after restart = %s, want 3", got)
	}
	cfg, _ := os.ReadFile(filepath.Join(s.Dir(), "config.xml"))
	if strings.Count(string(cfg), "<listen_host>") != 1 || !strings.Contains(string(cfg), "<listen_host>127.0.0.1</listen_host>") {
		t.Fatalf("config must listen on 127.0.0.1 only")
	}
	if strings.Contains(string(cfg), "/var/lib/clickhouse") || strings.Contains(string(cfg), "/var/log/") {
		t.Fatalf("config still points at system paths")
	}
}

func TestParallelServersGetTheirOwnPorts(t *testing.T) {
	a, b := New(t), New(t)
	if a.Addr() == b.Addr() || a.HTTPAddr() == b.HTTPAddr() {
		t.Fatalf("ports shared: %s %s", a.Addr(), b.Addr())
	}
}

func TestLaunchAndClose(t *testing.T) {
	s, err := Launch("")
	if err != nil {
		t.Fatal(err)
	}
	dir := s.Dir()
	s.Close()
	s.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Launch's dir not removed: %v", err)
	}
}

func TestMissingBinary(t *testing.T) {
	old := Binary
	Binary = "clickhouse-server-does-not-exist"
	defer func() { Binary = old }()
	_, err := Launch("")
	if err == nil || err.Error() != MissingHint {
		t.Fatalf("err = %v, want %q", err, MissingHint)
	}
}

func TestClusterRunsOnClusterDDLAndReplicatedTables(t *testing.T) {
	c := NewClusterWith(t, ClusterSpec{Shards: 2, Replicas: 2})
	t.Logf("cluster of %d x %d started in %v (zookeeper %v)", c.Shards(), c.Replicas(), c.StartTook(), c.ZooKeeper().StartTook())
	if len(c.Addrs()) != 4 || c.Name() != DefaultClusterName {
		t.Fatalf("addrs %v, name %q", c.Addrs(), c.Name())
	}
	n0 := c.Node(0)
	if got := query(t, n0, "SELECT count() FROM system.clusters WHERE cluster = '"+c.Name()+"'"); got != "4" {
		t.Fatalf("system.clusters has %s members, want 4", got)
	}
	query(t, n0, "CREATE TABLE default.l ON CLUSTER "+c.Name()+" (x UInt64) ENGINE = ReplicatedMergeTree('/t/{shard}/l', '{replica}') ORDER BY x")
	query(t, n0, "CREATE TABLE default.d ON CLUSTER "+c.Name()+" AS default.l ENGINE = Distributed("+c.Name()+", default, l, x)")
	queryWith(t, n0, "insert_distributed_sync=1", "INSERT INTO default.d SELECT number FROM system.numbers LIMIT 10")
	// Read from the replica the insert may not have gone to: it holds the
	// rows once replication copied them (a read right after the insert may
	// see fewer).
	await.Until(t, 10*time.Second, "the Distributed table counts 10 from shard 2's second replica", func() bool {
		return query(t, c.Node(3), "SELECT count() FROM default.d") == "10"
	})
	// Every replica gets its shard's rows by replication: x % 2 picks the
	// shard, so each holds 5.
	for i := range 4 {
		await.Until(t, 10*time.Second, "replica holds its shard's 5 rows", func() bool {
			return query(t, c.Node(i), "SELECT count() FROM default.l") == "5"
		})
	}
	// A replica killed and started again still has them, and takes what
	// it missed.
	c.Stop(1)
	queryWith(t, n0, "insert_distributed_sync=1", "INSERT INTO default.d SELECT number + 10 FROM system.numbers LIMIT 10")
	if err := c.Start(1); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 20*time.Second, "restarted replica holds 10 rows", func() bool {
		return query(t, c.Node(1), "SELECT count() FROM default.l") == "10"
	})
}

func TestTLSListener(t *testing.T) {
	f := tlstest.New(t)
	s := NewTLS(t, TLS{CertFile: f.ServerCert, KeyFile: f.ServerKey, ClientCA: f.CA})
	if s.SecureAddr() == "" || s.SecureAddr() == s.Addr() {
		t.Fatalf("secure addr %q", s.SecureAddr())
	}
	cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := os.ReadFile(f.CA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c, err := tls.Dial("tcp", s.SecureAddr(), &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("handshake with the secure port: %v", err)
	}
	c.Close()
}
