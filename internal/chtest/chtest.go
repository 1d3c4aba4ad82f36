package chtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashgate/internal/proctest"
)

// Binary is the clickhouse-server executable; tests may point it elsewhere
// before starting a server.
var Binary = "clickhouse-server"

// ConfigDir holds the config.xml and users.xml that are copied (with paths
// and ports rewritten) for every server.
var ConfigDir = "/etc/clickhouse-server"

// MissingHint is the message a test fails with when clickhouse-server is absent.
const MissingHint = "clickhouse-server not found: apt-get install -y clickhouse-server clickhouse-client"

// ReadyTimeout bounds how long a start waits for /ping to answer.
var ReadyTimeout = 60 * time.Second

// Server is one clickhouse-server child process bound to 127.0.0.1. Its
// ports and data directory stay the same across Stop/Start.
type Server struct {
	proc                      *proctest.Child
	dir                       string
	spec                      nodeSpec
	tcpPort, httpPort, ipPort int
	securePort                int // 0 without TLS
}

// nodeSpec is what a server gets beyond the stock config: TLS, and for a
// cluster member its fixed ports and the cluster's elements.
type nodeSpec struct {
	tls *TLS
	// ports, if set, are the tcp, http and interserver ports (a cluster
	// names them in every member's config, so they are picked up front).
	ports []int
	// elements replace the stock config's elements of the same name
	// (remote_servers, zookeeper, macros, ...), or are added.
	elements map[string]string
}

// TLS is what NewTLS serves on the secure native port (tcp_port_secure):
// a certificate and its key (PEM), and, if ClientCA is set, a CA the
// client's certificate must chain to (no client certificate, no
// connection).
type TLS struct {
	CertFile, KeyFile string
	ClientCA          string
}

// Start starts a clickhouse-server for the test and returns its native
// protocol address. The server is killed when the test ends.
func Start(t testing.TB) string {
	t.Helper()
	return New(t).Addr()
}

// New starts a clickhouse-server for the test and returns its handle, for
// tests that stop and restart it. The server is killed when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	return proctest.ForTest(t, "chtest", launch)
}

// NewTLS starts a clickhouse-server that also listens with TLS on
// SecureAddr (the plain Addr stays open for set-up). It is killed when the
// test ends.
func NewTLS(t testing.TB, tls TLS) *Server {
	t.Helper()
	return proctest.ForTest(t, "chtest", func(dir string, own bool) (*Server, error) {
		return launchNode(dir, own, nodeSpec{tls: &tls})
	})
}

// Launch starts a clickhouse-server outside any test, for TestMain, so that
// one server is shared by a package's tests:
//
//	srv, err := chtest.Launch("")
//	if err != nil { fmt.Println(err); os.Exit(1) }
//	code := m.Run()
//	srv.Close()
//	os.Exit(code)
//
// (Main does just that.) dir "" means a fresh temporary directory, removed
// by Close.
func Launch(dir string) (*Server, error) {
	return proctest.InDir(dir, "chtest-", launch)
}

// Main is a TestMain that shares one clickhouse-server among a package's
// tests: it launches it into *shared, runs the tests, closes the server and
// exits with the tests' code.
func Main(m *testing.M, shared **Server) {
	s, err := Launch("")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*shared = s
	fmt.Printf("clickhouse-server started in %v\n", s.StartTook())
	code := m.Run()
	s.Close()
	os.Exit(code)
}

func launch(dir string, own bool) (*Server, error) { return launchNode(dir, own, nodeSpec{}) }

func launchNode(dir string, own bool, spec nodeSpec) (*Server, error) {
	bin, err := exec.LookPath(Binary)
	if err != nil {
		// Debian installs it in /usr/sbin, which a user's PATH may lack.
		bin = "/usr/sbin/clickhouse-server"
		if _, err := os.Stat(bin); err != nil || Binary != "clickhouse-server" {
			return nil, errors.New(MissingHint)
		}
	}
	s := &Server{dir: dir, spec: spec}
	errLog := filepath.Join(dir, "log", "clickhouse-server.err.log")
	stdout := filepath.Join(dir, "log", "stdout.log")
	client := &http.Client{Timeout: time.Second}
	s.proc = proctest.NewChild(dir, own, proctest.Spec{
		Name: func() string {
			return fmt.Sprintf("clickhouse-server (native port %d, http port %d)", s.tcpPort, s.httpPort)
		},
		Command: func() *exec.Cmd {
			cmd := exec.Command(bin, "--config-file="+filepath.Join(dir, "config.xml"))
			cmd.Dir = dir
			return cmd
		},
		Output:  stdout,
		Fresh:   []string{errLog},
		Log:     func() []byte { return append(proctest.Tail(errLog), proctest.Tail(stdout)...) },
		Ready:   func() error { return ping(client, "http://"+s.HTTPAddr()+"/ping") },
		Probe:   "/ping",
		Timeout: ReadyTimeout,
		// The server usually answers within a few hundred milliseconds.
		Backoff: 5 * time.Millisecond,
	})
	err = s.proc.Launch(func() error {
		if spec.ports != nil {
			if s.tcpPort != 0 {
				// A cluster's ports are in every member's config: the
				// cluster picks them all again (LaunchCluster).
				return ErrPortsTaken
			}
			s.tcpPort, s.httpPort, s.ipPort = spec.ports[0], spec.ports[1], spec.ports[2]
			return s.writeConfig()
		}
		ports, err := proctest.FreePorts(4)
		if err != nil {
			return err
		}
		s.tcpPort, s.httpPort, s.ipPort = ports[0], ports[1], ports[2]
		if spec.tls != nil {
			s.securePort = ports[3]
		}
		return s.writeConfig()
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Addr is host:port of the native protocol listener (what clickhouse-go
// and clickhouse-client use); it does not change across restarts.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tcpPort)) }

// SecureAddr is host:port of the TLS native listener (NewTLS), "" without.
func (s *Server) SecureAddr() string {
	if s.securePort == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.securePort))
}

// HTTPAddr is host:port of the HTTP listener.
func (s *Server) HTTPAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.httpPort)) }

// Dir is the server's directory: config.xml, users.xml, data/, log/.
func (s *Server) Dir() string { return s.dir }

// StartTook is how long the last (re)start took until /ping answered.
func (s *Server) StartTook() time.Duration { return s.proc.StartTook() }

// Stop kills the server with SIGKILL, as a crash would, and waits for it to
// exit. Inserted parts are on disk and come back with Start; clients see
// connection errors meanwhile.
func (s *Server) Stop() { s.proc.Stop() }

// Start restarts a stopped server on the same ports and data directory. It
// returns an error if it cannot come back.
func (s *Server) Start() error {
	if err := s.proc.Start(); err != nil {
		return fmt.Errorf("chtest: restart on %s: %w", s.Addr(), err)
	}
	return nil
}

// Pause freezes the server (SIGSTOP): connections stay open but nothing is
// answered, which is how a hung ClickHouse looks to a client.
func (s *Server) Pause() { s.proc.Pause() }

// Resume undoes Pause.
func (s *Server) Resume() { s.proc.Resume() }

// Close kills the server for good and removes a directory Launch created.
func (s *Server) Close() { s.proc.Close() }

var (
	commentRE    = regexp.MustCompile(`(?s)<!--.*?-->`)
	listenHostRE = regexp.MustCompile(`<listen_host>[^<]*</listen_host>`)
	closingRE    = regexp.MustCompile(`</(yandex|clickhouse)>\s*$`)
)

// writeConfig copies the system config with every path pointing into the
// server's directory and every listener on its own port on 127.0.0.1.
func (s *Server) writeConfig() error {
	src, err := os.ReadFile(filepath.Join(ConfigDir, "config.xml"))
	if err != nil {
		return fmt.Errorf("read config (%s): %w", MissingHint, err)
	}
	users, err := os.ReadFile(filepath.Join(ConfigDir, "users.xml"))
	if err != nil {
		return fmt.Errorf("read users.xml (%s): %w", MissingHint, err)
	}
	for _, d := range []string{"data", "tmp", "user_files", "format_schemas", "log"} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o755); err != nil {
			return err
		}
	}
	// Comments go first: the stock config has commented-out listeners
	// (https_port, listen_host) that a tag rewrite must not revive.
	cfg := commentRE.ReplaceAllString(string(src), "")
	cfg = listenHostRE.ReplaceAllString(cfg, "")
	elements := maps.Clone(s.spec.elements)
	if elements == nil {
		elements = map[string]string{}
	}
	if t := s.spec.tls; t != nil {
		elements["tcp_port_secure"] = "<tcp_port_secure>" + strconv.Itoa(s.securePort) + "</tcp_port_secure>"
		elements["openSSL"] = openSSL(t)
	}
	for _, name := range slices.Sorted(maps.Keys(elements)) {
		// Stock elements are <name ...>...</name> or <name .../>.
		re := regexp.MustCompile(`(?s)<` + name + `(\s[^>]*)?(/>|>.*?</` + name + `>)`)
		cfg = re.ReplaceAllString(cfg, "")
	}
	set := []struct{ tag, val string }{
		{"log", filepath.Join(s.dir, "log", "clickhouse-server.log")},
		{"errorlog", filepath.Join(s.dir, "log", "clickhouse-server.err.log")},
		{"http_port", strconv.Itoa(s.httpPort)},
		{"tcp_port", strconv.Itoa(s.tcpPort)},
		{"interserver_http_port", strconv.Itoa(s.ipPort)},
		{"path", filepath.Join(s.dir, "data") + "/"},
		{"tmp_path", filepath.Join(s.dir, "tmp") + "/"},
		{"user_files_path", filepath.Join(s.dir, "user_files") + "/"},
		{"format_schema_path", filepath.Join(s.dir, "format_schemas") + "/"},
		{"users_config", filepath.Join(s.dir, "users.xml")},
		{"listen_host", "127.0.0.1"},
	}
	m := closingRE.FindStringSubmatchIndex(cfg)
	if m == nil {
		return errors.New("config.xml: no closing </yandex> or </clickhouse>")
	}
	var extra strings.Builder
	for _, kv := range set {
		re := regexp.MustCompile(`<` + kv.tag + `>[^<]*</` + kv.tag + `>`)
		elem := "<" + kv.tag + ">" + kv.val + "</" + kv.tag + ">"
		if loc := re.FindStringIndex(cfg); loc != nil && loc[0] < m[0] {
			cfg = cfg[:loc[0]] + elem + cfg[loc[1]:]
			m = closingRE.FindStringSubmatchIndex(cfg)
		} else {
			extra.WriteString("    " + elem + "\n")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(elements)) {
		extra.WriteString("    " + elements[name] + "\n")
	}
	cfg = cfg[:m[0]] + extra.String() + cfg[m[0]:]
	if err := os.WriteFile(filepath.Join(s.dir, "config.xml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.dir, "users.xml"), users, 0o644)
}

// openSSL is the server's TLS: its certificate, and the client CA it
// requires when one is given. No dhParamsFile: the stock one is not
// installed, and ECDHE needs none.
func openSSL(t *TLS) string {
	mode, ca := "none", ""
	if t.ClientCA != "" {
		mode, ca = "strict", "<caConfig>"+t.ClientCA+"</caConfig>"
	}
	return "<openSSL><server><certificateFile>" + t.CertFile + "</certificateFile><privateKeyFile>" + t.KeyFile +
		"</privateKeyFile>" + ca + "<verificationMode>" + mode + "</verificationMode><loadDefaultCAFile>false</loadDefaultCAFile>" +
		"<cacheSessions>true</cacheSessions><disableProtocols>sslv2,sslv3</disableProtocols><preferServerCiphers>true</preferServerCiphers>" +
		"</server></openSSL>"
}

func ping(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	if resp.StatusCode != http.StatusOK || !bytes.HasPrefix(b, []byte("Ok.")) {
		return fmt.Errorf("/ping answered %d %q", resp.StatusCode, b)
	}
	return nil
}
