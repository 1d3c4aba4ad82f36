package chtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
	mu                        sync.Mutex
	bin                       string
	dir                       string
	ownDir                    bool
	tcpPort, httpPort, ipPort int
	cmd                       *exec.Cmd
	exited                    chan struct{}
	closed                    bool
	startTook                 time.Duration
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
	s, err := launch(t.TempDir(), false)
	if err != nil {
		t.Fatalf("chtest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
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
// dir "" means a fresh temporary directory, removed by Close.
func Launch(dir string) (*Server, error) {
	own := false
	if dir == "" {
		d, err := os.MkdirTemp("", "chtest-")
		if err != nil {
			return nil, err
		}
		dir, own = d, true
	}
	s, err := launch(dir, own)
	if err != nil && own {
		os.RemoveAll(dir)
	}
	return s, err
}

func launch(dir string, own bool) (*Server, error) {
	bin, err := exec.LookPath(Binary)
	if err != nil {
		// Debian installs it in /usr/sbin, which a user's PATH may lack.
		bin = "/usr/sbin/clickhouse-server"
		if _, err := os.Stat(bin); err != nil || Binary != "clickhouse-server" {
			return nil, errors.New(MissingHint)
		}
	}
	s := &Server{dir: dir, ownDir: own, bin: bin}
	// Ports picked by listening on :0 can be taken by someone else before
	// the server binds them; a fresh pick almost always succeeds.
	for range 5 {
		if s.tcpPort, s.httpPort, s.ipPort, err = freePorts(); err != nil {
			return nil, err
		}
		if err = s.writeConfig(); err != nil {
			return nil, err
		}
		if err = s.start(); err == nil {
			return s, nil
		}
		if !errors.Is(err, errBind) {
			return nil, err
		}
	}
	return nil, err
}

// Addr is host:port of the native protocol listener (what clickhouse-go
// and clickhouse-client use); it does not change across restarts.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tcpPort)) }

// HTTPAddr is host:port of the HTTP listener.
func (s *Server) HTTPAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.httpPort)) }

// Dir is the server's directory: config.xml, users.xml, data/, log/.
func (s *Server) Dir() string { return s.dir }

// StartTook is how long the last (re)start took until /ping answered.
func (s *Server) StartTook() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startTook
}

// Stop kills the server with SIGKILL, as a crash would, and waits for it to
// exit. Inserted parts are on disk and come back with Start; clients see
// connection errors meanwhile.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
}

// Start restarts a stopped server on the same ports and data directory. It
// returns an error if it cannot come back.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	if err := s.start(); err != nil {
		return fmt.Errorf("chtest: restart on %s: %w", s.Addr(), err)
	}
	return nil
}

// Close kills the server for good and removes a directory Launch created.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.kill()
	if s.ownDir {
		os.RemoveAll(s.dir)
	}
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

var errBind = errors.New("port already in use")

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
	cfg = cfg[:m[0]] + extra.String() + cfg[m[0]:]
	if err := os.WriteFile(filepath.Join(s.dir, "config.xml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.dir, "users.xml"), users, 0o644)
}

func (s *Server) start() error {
	if s.closed {
		return errors.New("server closed")
	}
	errLog := filepath.Join(s.dir, "log", "clickhouse-server.err.log")
	_ = os.Remove(errLog)
	out, err := os.Create(filepath.Join(s.dir, "log", "stdout.log"))
	if err != nil {
		return err
	}
	defer out.Close()
	t0 := time.Now()
	cmd := exec.Command(s.bin, "--config-file="+filepath.Join(s.dir, "config.xml"))
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited

	client := &http.Client{Timeout: time.Second}
	url := "http://" + s.HTTPAddr() + "/ping"
	deadline := t0.Add(ReadyTimeout)
	backoff := 5 * time.Millisecond
	for {
		if ping(client, url) == nil {
			s.startTook = time.Since(t0)
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			log := append(tail(errLog), tail(out.Name())...)
			if bytes.Contains(log, []byte("Address already in use")) {
				return errBind
			}
			return fmt.Errorf("clickhouse-server (native port %d) exited: %s", s.tcpPort, log)
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("clickhouse-server (http port %d) did not answer /ping within %v: %s", s.httpPort, ReadyTimeout, tail(errLog))
		}
		// Polling the readiness condition with a capped backoff: the
		// server usually answers within a few hundred milliseconds.
		time.Sleep(backoff)
		backoff = min(backoff*2, 50*time.Millisecond)
	}
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

func freePorts() (tcp, http, interserver int, err error) {
	var ls [3]net.Listener
	defer func() {
		for _, l := range ls {
			if l != nil {
				l.Close()
			}
		}
	}()
	var ports [3]int
	for i := range ls {
		if ls[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return 0, 0, 0, err
		}
		ports[i] = ls[i].Addr().(*net.TCPAddr).Port
	}
	return ports[0], ports[1], ports[2], nil
}

func tail(path string) []byte {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return bytes.TrimSpace(b)
}

// signal is used by tests that freeze the server.
func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Pause freezes the server (SIGSTOP): connections stay open but nothing is
// answered, which is how a hung ClickHouse looks to a client.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume undoes Pause.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }
