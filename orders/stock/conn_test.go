package stock

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"flashgate/conf"
	"flashgate/internal/await"
	"flashgate/internal/proctest"
	"flashgate/internal/redistest"
	"flashgate/internal/tlstest"
)

// startRedisWith starts a redis-server on a free loopback port with the
// arguments args(port) returns (ACL users, TLS), which redistest.New does
// not take, and waits until ready(addr) holds. It returns host:port.
func startRedisWith(t *testing.T, args func(port int) []string, ready func(addr string) error) string {
	t.Helper()
	if _, err := exec.LookPath(redistest.Binary); err != nil {
		t.Fatal(redistest.MissingHint)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "redis.log")
	var port int
	addr := func() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	child := proctest.NewChild(dir, false, proctest.Spec{
		Name: func() string { return fmt.Sprintf("redis-server on port %d", port) },
		Command: func() *exec.Cmd {
			base := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--logfile", logPath}
			return exec.Command(redistest.Binary, append(base, args(port)...)...)
		},
		Fresh:   []string{logPath},
		Log:     func() []byte { return proctest.Tail(logPath) },
		Ready:   func() error { return ready(addr()) },
		Probe:   "PING",
		Timeout: redistest.ReadyTimeout,
		Backoff: time.Millisecond,
	})
	if err := child.Launch(func() (err error) {
		port, err = proctest.FreePort()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(child.Close)
	return addr()
}

// pingOn sends AUTH (when user or password is set) and PING on c.
func pingOn(c net.Conn, user, password string) error {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	cmds, replies := "PING\r\n", 1
	if password != "" {
		cmds, replies = "AUTH "+user+" "+password+"\r\n"+cmds, 2
	}
	if _, err := c.Write([]byte(cmds)); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	var line string
	for range replies {
		var err error
		if line, err = r.ReadString('\n'); err != nil {
			return err
		}
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// dealsWith opens a Store at addr and proves it works: a sale warmed, one
// purchase deducted.
func dealsWith(t *testing.T, addr string, opts Options) {
	t.Helper()
	s, err := Open(context.Background(), addr, testOptions(opts))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	product := "conn" + strconv.FormatInt(orderSeq.Add(1), 10)
	warm(t, s, product, 10, 1)
	if out := mustDeduct(t, s, attempt(product, "u1", 1, 1)); out.Code != OK || out.Remaining != 9 {
		t.Fatalf("deduction = %+v, want OK with 9 left", out)
	}
}

// refused opens a Store at addr that must fail, and returns its error,
// which must not quote secret.
func refused(t *testing.T, addr string, opts Options, secret string) error {
	t.Helper()
	s, err := Open(context.Background(), addr, testOptions(opts))
	if err == nil {
		s.Close()
		t.Fatalf("Open(%s) succeeded", strings.ReplaceAll(addr, secret, "***"))
	}
	if secret != "" && strings.Contains(err.Error(), secret) {
		t.Fatalf("the error quotes the password: %v", err)
	}
	return err
}

func TestOpenACLUser(t *testing.T) {
	// The edge's user sees only sk:* keys and channels: the Store needs
	// no more. The default user is off, so a password alone is not enough.
	addr := startRedisWith(t, func(port int) []string {
		return []string{"--port", strconv.Itoa(port),
			"--user", "default", "off",
			"--user", "edge", "on", ">edge-secret-pw", "~sk:*", "&sk:*", "+@all"}
	}, func(addr string) error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return pingOn(c, "edge", "edge-secret-pw")
	})

	dealsWith(t, addr, Options{Username: "edge", Password: "edge-secret-pw"})
	dealsWith(t, "redis://edge:edge-secret-pw@"+addr+"/0", Options{})

	refused(t, addr, Options{Password: "edge-secret-pw"}, "")
	refused(t, "redis://edge:wrong-secret-pw@"+addr, Options{}, "wrong-secret-pw")
	if err := refused(t, "redis://edge:pw@"+addr, Options{Username: "edge", Password: "pw"}, ""); !strings.Contains(err.Error(), "in one place") {
		t.Fatalf("credentials in the URL and the options: %v", err)
	}
}

func TestOpenUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	startRedisWith(t, func(int) []string {
		return []string{"--port", "0", "--unixsocket", sock}
	}, func(string) error {
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			return err
		}
		return pingOn(c, "", "")
	})
	dealsWith(t, "unix://"+sock+"?db=2", Options{})
}

func TestOpenTLSWithClientCertificate(t *testing.T) {
	certs := tlstest.New(t)
	clientTLS := func(f tlstest.Files, withCert bool) *tls.Config {
		t.Helper()
		c := conf.RedisTLSConfig{CAFile: f.CA}
		if withCert {
			c.CertFile, c.KeyFile = f.ClientCert, f.ClientKey
		}
		tc, errs := c.Config()
		if errs != nil {
			t.Fatal(errs)
		}
		return tc
	}
	good := clientTLS(certs, true)
	addr := startRedisWith(t, func(port int) []string {
		// Debian's redis-server is built with TLS.
		return []string{"--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey,
			"--tls-ca-cert-file", certs.CA, "--tls-auth-clients", "yes"}
	}, func(addr string) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, good)
		if err != nil {
			return err
		}
		return pingOn(c, "", "")
	})

	dealsWith(t, addr, Options{TLS: good})
	dealsWith(t, "rediss://"+addr, Options{TLS: good})

	for _, tc := range []struct {
		name string
		addr string
		tls  *tls.Config
		want string // in the error; "" for any
	}{
		{"no client certificate", addr, clientTLS(certs, false), ""},
		{"a server signed by a CA the edge does not trust", addr, clientTLS(tlstest.New(t), true), "certificate"},
		{"plain TCP", addr, nil, ""},
		{"the system's roots (rediss:// alone)", "rediss://" + addr, nil, "certificate"},
		{"a redis:// URL with TLS options", "redis://" + addr, good, "write rediss://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := refused(t, tc.addr, Options{TLS: tc.tls, Timeout: time.Second}, "")
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestOpenThroughSentinelFollowsAFailover(t *testing.T) {
	const dataPW, sentinelPW = "data-secret-pw", "sentinel-secret-pw"
	sen := redistest.NewSentinelWith(t, redistest.SentinelOptions{Password: dataPW, SentinelPassword: sentinelPW})
	addrs := sen.SentinelAddrs()

	// The URL form: the hosts are sentinels, the credentials the master's.
	dealsWith(t, "redis://:"+dataPW+"@"+addrs[0]+"?addr="+addrs[1]+"&master_set="+sen.MasterSet(),
		Options{Sentinel: SentinelOptions{Password: sentinelPW}})
	refused(t, "", Options{Password: dataPW, Sentinel: SentinelOptions{MasterSet: sen.MasterSet(), Addrs: addrs, Password: "wrong-secret-pw"}}, "wrong-secret-pw")

	s, err := Open(context.Background(), "", testOptions(Options{
		Password: dataPW,
		Sentinel: SentinelOptions{MasterSet: sen.MasterSet(), Addrs: addrs, Password: sentinelPW},
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.Embedded() || s.Addr() != strings.Join(addrs, ",") {
		t.Fatalf("Addr %q, embedded %v", s.Addr(), s.Embedded())
	}
	warm(t, s, "fo", 100, 1)
	for i := range 3 {
		if out := mustDeduct(t, s, attempt("fo", "before"+strconv.Itoa(i), 1, 1)); out.Code != OK {
			t.Fatalf("deduction before the failover: %+v", out)
		}
	}
	old := sen.Master()
	cmds := s.c.B()
	direct := func(addr string) rueidis.Client {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Password: dataPW,
			DisableCache: true, ForceSingleClient: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	// The replica holds what was sold: this failover loses nothing.
	if n, err := direct(old).Do(context.Background(), cmds.Wait().Numreplicas(1).Timeout(5000).Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}

	sen.Kill(old)
	start := time.Now()
	promoted := sen.AwaitFailover(old, 30*time.Second)
	t.Logf("sentinels promoted %s %v after the kill", promoted, time.Since(start))

	// The Store follows the sentinels to the new master by itself. The
	// first calls may fail while it switches; the deduction then is
	// decided by the new master: OK, or RECOVERING once Redis going back
	// in time is detected on a master change — either way not an error.
	var out Outcome
	await.NoError(t, 15*time.Second, "a deduction through the promoted master", func() error {
		var err error
		out, err = s.Deduct(context.Background(), attempt("fo", "after"+strconv.FormatInt(orderSeq.Add(1), 10), 1, 1))
		return err
	})
	t.Logf("first deduction answered %v after the kill", time.Since(start))
	switch out.Code {
	case OK:
		n, err := direct(promoted).Do(context.Background(), cmds.Get().Key("sk:{fo}:stock").Build()).AsInt64()
		if err != nil || n != out.Remaining || n != 96 {
			t.Fatalf("stock on the promoted master = %d, %v; the deduction said %d left, want 96", n, err, out.Remaining)
		}
	case Recovering:
	default:
		t.Fatalf("deduction after the failover: %+v", out)
	}
	// Any write of the Store's client lands on the promoted master too
	// (the deduction may have been fenced before writing anything).
	ctx := context.Background()
	if err := s.c.Do(ctx, cmds.Set().Key("sk:{fo}:probe").Value("after").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	got, err := direct(promoted).Do(ctx, cmds.Get().Key("sk:{fo}:probe").Build()).ToString()
	if err != nil || got != "after" {
		t.Fatalf("the probe on the promoted master = %q, %v", got, err)
	}
}

func TestOpenRejectsContradictions(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		opts       Options
		want       string
	}{
		{"a cluster seed list and sentinels", "h1:1,h2:2", Options{Sentinel: SentinelOptions{MasterSet: "m", Addrs: []string{"s:1"}}}, "both name servers"},
		{"a URL and sentinels", "redis://h:1", Options{Sentinel: SentinelOptions{MasterSet: "m", Addrs: []string{"s:1"}}}, "both name servers"},
		{"a master set without sentinels", "", Options{Sentinel: SentinelOptions{MasterSet: "m"}}, "without sentinels"},
		{"sentinel credentials without a master set", "h:1", Options{Sentinel: SentinelOptions{Password: "pw"}}, "without a MasterSet"},
		{"skip_verify", "rediss://h:1?skip_verify=true", Options{}, "skip_verify"},
		{"TLS on the embedded server", "", Options{TLS: &tls.Config{}}, "embedded"},
		{"a bad URL, password hidden", "redis://u:hidden-secret-pw@h:port", Options{}, "redis URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := refused(t, tc.addr, tc.opts, "hidden-secret-pw")
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}
