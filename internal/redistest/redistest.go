package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary is the redis-server executable; tests may point it elsewhere
// before starting a server.
var Binary = "redis-server"

// MissingHint is the message a test fails with when redis-server is absent.
const MissingHint = "redis-server not found: apt-get install -y redis-server"

// ReadyTimeout bounds how long Launch waits for PING to answer.
var ReadyTimeout = 15 * time.Second

// Server is one redis-server child process bound to 127.0.0.1.
// The port stays the same across Stop/Start so that clients holding the
// address reconnect to the restarted (empty) server.
type Server struct {
	mu     sync.Mutex
	dir    string
	ownDir bool // dir was created by Launch and is removed by Close
	port   int
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been reaped
	closed bool
}

// Start starts a redis-server for the test and returns its address.
// The server is killed when the test ends.
func Start(t testing.TB) string {
	t.Helper()
	return New(t).Addr()
}

// New starts a redis-server for the test and returns its handle, for tests
// that stop, restart or pause it. The server is killed when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s, err := launch(t.TempDir(), false)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Launch starts a redis-server outside any test, for TestMain:
//
//	srv, err := redistest.Launch("")
//	if err != nil { fmt.Println(err); os.Exit(1) }
//	code := m.Run()
//	srv.Close()
//	os.Exit(code)
//
// dir "" means a fresh temporary directory, removed by Close.
func Launch(dir string) (*Server, error) {
	own := false
	if dir == "" {
		d, err := os.MkdirTemp("", "redistest-")
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
	if _, err := exec.LookPath(Binary); err != nil {
		return nil, errors.New(MissingHint)
	}
	s := &Server{dir: dir, ownDir: own}
	// A port picked by listening on :0 can be taken by someone else before
	// redis-server binds it; a fresh pick almost always succeeds.
	var err error
	for range 5 {
		if s.port, err = freePort(); err != nil {
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

// Addr is host:port of the server; it does not change across restarts.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Dir is the server's working directory (its log is redis.log there).
func (s *Server) Dir() string { return s.dir }

// Stop kills the server with SIGKILL, as a crash would, and waits for it to
// exit. Its memory is gone; connected clients see connection resets.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
}

// Start restarts a stopped server on the same port, empty. It panics if the
// server cannot come back (a test cannot go on without it).
func (s *Server) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	if err := s.start(); err != nil {
		panic(fmt.Sprintf("redistest: restart on %s: %v", s.Addr(), err))
	}
}

// Restart is Stop then Start: Redis losing its memory.
func (s *Server) Restart() {
	s.Stop()
	s.Start()
}

// Pause freezes the server (SIGSTOP): connections stay open but nothing is
// answered, which is how an overloaded or hung Redis looks to a client.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume undoes Pause.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

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

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill() // SIGKILL also ends a SIGSTOPped process
	<-s.exited
	s.cmd = nil
}

var errBind = errors.New("port already in use")

func (s *Server) start() error {
	if s.closed {
		return errors.New("server closed")
	}
	logPath := filepath.Join(s.dir, "redis.log")
	_ = os.Remove(logPath)
	cmd := exec.Command(Binary,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", logPath,
	)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", Binary, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited

	deadline := time.Now().Add(ReadyTimeout)
	backoff := time.Millisecond
	for {
		if ping(s.Addr()) == nil {
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			log := tail(logPath)
			if bytes.Contains(log, []byte("Address already in use")) {
				return errBind
			}
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, log)
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %s", s.port, ReadyTimeout, tail(logPath))
		}
		// Polling the readiness condition with a capped backoff: the first
		// PING usually succeeds within a few milliseconds.
		time.Sleep(backoff)
		backoff = min(backoff*2, 50*time.Millisecond)
	}
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		// e.g. "-LOADING": up but not ready yet.
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(path string) []byte {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return bytes.TrimSpace(b)
}
