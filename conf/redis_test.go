package conf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"flashgate/conf/field"
	"flashgate/internal/tlstest"
)

func TestRedisConnErrorsNameTheField(t *testing.T) {
	certs := tlstest.New(t)
	notPEM := filepath.Join(t.TempDir(), "junk.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	sentinel := "  sentinel:\n    master_set: m\n    addrs: [\"127.0.0.1:26379\"]\n"
	cases := []struct {
		name, redis string
		path, msg   string
	}{
		{"sentinel and a cluster seed list", "  addr: \"h1:1,h2:2\"\n" + sentinel, "redis.addr", "must be empty with redis.sentinel"},
		{"sentinel and a URL with master_set", "  addr: \"redis://h:26379?master_set=m\"\n" + sentinel, "redis.addr", "must be empty with redis.sentinel"},
		{"sentinel without master_set", "  sentinel:\n    addrs: [\"h:26379\"]\n", "redis.sentinel.master_set", "is required"},
		{"sentinel without addrs", "  sentinel:\n    master_set: m\n", "redis.sentinel.addrs", "is required"},
		{"sentinel with a bad addr", "  sentinel:\n    master_set: m\n    addrs: [\"h:1\", nowhere]\n", "redis.sentinel.addrs[1]", "host:port"},
		{"sentinel password without sentinel", "  addr: \"h:1\"\n  sentinel:\n    password: pw\n", "redis.sentinel.password", "no Sentinel"},
		{"sentinel password from a missing env", sentinel + "    password: env:FLASHGATE_TEST_NOPE\n", "redis.sentinel.password", "not set"},
		{"username from a missing env", "  addr: \"h:1\"\n  username: env:FLASHGATE_TEST_NOPE\n", "redis.username", "not set"},
		{"username on the embedded server", "  username: alice\n", "redis.username", "embedded"},
		{"tls on the embedded server", "  tls:\n    ca_file: " + certs.CA + "\n", "redis.tls", "embedded"},
		{"a certificate without its key", "  addr: \"h:1\"\n  tls:\n    cert_file: " + certs.ClientCert + "\n", "redis.tls.key_file", "required with tls.cert_file"},
		{"a key without its certificate", "  addr: \"h:1\"\n  tls:\n    key_file: " + certs.ClientKey + "\n", "redis.tls.cert_file", "required with tls.key_file"},
		{"an unreadable CA file", "  addr: \"h:1\"\n  tls:\n    ca_file: /nonexistent/ca.pem\n", "redis.tls.ca_file", "no such file"},
		{"a CA file without certificates", "  addr: \"h:1\"\n  tls:\n    ca_file: " + notPEM + "\n", "redis.tls.ca_file", "no PEM certificate"},
		{"a certificate file that is not one", "  addr: \"h:1\"\n  tls:\n    cert_file: " + notPEM + "\n    key_file: " + certs.ClientKey + "\n", "redis.tls.cert_file", "no PEM certificate"},
		{"a key that is not the certificate's", "  addr: \"h:1\"\n  tls:\n    cert_file: " + certs.ClientCert + "\n    key_file: " + certs.ServerKey + "\n", "redis.tls.key_file", "does not match"},
		{"tls with a redis:// URL", "  addr: \"redis://h:1\"\n  tls:\n    ca_file: " + certs.CA + "\n", "redis.tls", "write rediss://"},
		{"tls with a unix socket", "  addr: \"unix:///run/redis.sock\"\n  tls:\n    ca_file: " + certs.CA + "\n", "redis.tls", "unix"},
		{"skip_verify in the URL", "  addr: \"rediss://h:1?skip_verify=true\"\n", "redis.addr", "certificates are always verified"},
		{"a URL parameter the edge would drop", "  addr: \"redis://h:1?protocol=2\"\n", "redis.addr", `"protocol" is not supported`},
		{"a URL scheme that is not Redis'", "  addr: \"http://h:1\"\n", "redis.addr", "redis, rediss or unix"},
		{"a password in the URL and in the section", "  addr: \"redis://:pw@h:1\"\n  password: other\n", "redis.password", "also in redis.addr's URL"},
		{"a username in the URL and in the section", "  addr: \"redis://bob:pw@h:1\"\n  username: alice\n", "redis.username", "also in redis.addr's URL"},
		{"master_set on a unix socket", "  addr: \"unix:///run/redis.sock?master_set=m\"\n", "redis.addr", "cannot name sentinels"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("redis:\n"+tc.redis), "t.yaml")
			var fe field.Errors
			if !errors.As(err, &fe) {
				t.Fatalf("want field errors, got %v", err)
			}
			for _, e := range fe {
				if e.Path == tc.path && strings.Contains(e.Msg, tc.msg) {
					return
				}
			}
			t.Fatalf("no error at %s containing %q in: %v", tc.path, tc.msg, err)
		})
	}
}

func TestRedisConnErrorsHideThePassword(t *testing.T) {
	const pw = "hunter2-very-secret"
	for _, addr := range []string{
		"redis://alice:" + pw + "@h:notaport/0",
		"redis://alice:" + pw + "@h:1?protocol=2",
		"rediss://alice:" + pw + "@h:1?skip_verify=1",
		"redis://:" + pw + "@h:1?master_set=m&addr=%zz",
	} {
		_, err := Parse([]byte("redis:\n  addr: \""+addr+"\"\n  password: other\n"), "t.yaml")
		if err == nil {
			t.Fatalf("%s accepted", addr)
		}
		if strings.Contains(err.Error(), pw) {
			t.Fatalf("the error quotes the password: %v", err)
		}
	}
}

func TestRedisConnValid(t *testing.T) {
	certs := tlstest.New(t)
	t.Setenv("FLASHGATE_TEST_SENTINEL_PW", "s3")
	doc, err := Parse([]byte("redis:\n  username: alice\n  password: pw\n"+
		"  sentinel:\n    master_set: m\n    addrs: [\"10.0.0.1:26379\", \"10.0.0.2:26379\"]\n    password: env:FLASHGATE_TEST_SENTINEL_PW\n"+
		"  tls:\n    ca_file: "+certs.CA+"\n    cert_file: "+certs.ClientCert+"\n    key_file: "+certs.ClientKey+"\n    server_name: redis.internal\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rc := doc.Config.Redis
	if rc.Embedded() {
		t.Fatal("a Sentinel setup with an empty addr reads as the embedded server")
	}
	tc, errs := rc.TLS.Config()
	if errs != nil || tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "redis.internal" || tc.InsecureSkipVerify {
		t.Fatalf("TLS config %+v, %v", tc, errs)
	}

	for _, addr := range []string{"redis://h1:26379?master_set=m&addr=h2:26379", "rediss://alice:pw@h:6380/2", "unix:///run/redis.sock?db=1"} {
		doc, err := Parse([]byte("redis:\n  addr: \""+addr+"\"\n"), "t.yaml")
		if err != nil {
			t.Errorf("%s: %v", addr, err)
			continue
		}
		if tc, errs := doc.Config.Redis.TLS.Config(); tc != nil || errs != nil {
			t.Errorf("%s: an empty tls section gives %+v, %v", addr, tc, errs)
		}
	}
	// Sentinel credentials with the master set in the URL.
	if _, err := Parse([]byte("redis:\n  addr: \"redis://h1:26379?master_set=m\"\n  sentinel:\n    password: pw\n"), "t.yaml"); err != nil {
		t.Errorf("sentinel.password with a URL's master_set: %v", err)
	}
}

func TestRedisConfigEqual(t *testing.T) {
	a := RedisConfig{Addr: "h:1", Sentinel: RedisSentinelConfig{Addrs: []string{}}}
	b := RedisConfig{Addr: "h:1"}
	if !a.Equal(b) {
		t.Error("an empty and an absent sentinel.addrs differ")
	}
	b.Sentinel.Addrs = []string{"s:1"}
	if a.Equal(b) {
		t.Error("different sentinels are equal")
	}
	a.Sentinel.Addrs = []string{"s:1"}
	a.TLS.CAFile = "ca.pem"
	if a.Equal(b) {
		t.Error("different TLS settings are equal")
	}
}
