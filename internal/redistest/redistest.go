package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashgate/internal/proctest"
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
	proc *proctest.Child
	port int
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
	return proctest.ForTest(t, "redistest", launch)
}

// NewPersistent is New with an RDB file in the server's directory: it
// saves only when told (Save, no automatic snapshots) and a restart
// (Start) loads what the last Save wrote — a Redis that comes back from a
// stale snapshot, without the writes made after it.
func NewPersistent(t testing.TB) *Server {
	t.Helper()
	return proctest.ForTest(t, "redistest", launchPersistent)
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
	return proctest.InDir(dir, "redistest-", launch)
}

func launch(dir string, own bool) (*Server, error) { return launchServer(dir, own, false) }

func launchPersistent(dir string, own bool) (*Server, error) { return launchServer(dir, own, true) }

func launchServer(dir string, own, persistent bool) (*Server, error) {
	if _, err := exec.LookPath(Binary); err != nil {
		return nil, errors.New(MissingHint)
	}
	s := &Server{}
	logPath := filepath.Join(dir, "redis.log")
	fresh := []string{logPath}
	if !persistent {
		// A SAVE sent to a server without persistence must not bring
		// its data back: every start is empty.
		fresh = append(fresh, filepath.Join(dir, dumpFile))
	}
	s.proc = proctest.NewChild(dir, own, proctest.Spec{
		Name: func() string { return fmt.Sprintf("redis-server on port %d", s.port) },
		Command: func() *exec.Cmd {
			return exec.Command(Binary,
				"--port", strconv.Itoa(s.port),
				"--bind", "127.0.0.1",
				"--save", "",
				"--appendonly", "no",
				"--daemonize", "no",
				"--dir", dir,
				"--dbfilename", dumpFile,
				"--logfile", logPath,
			)
		},
		Fresh:   fresh,
		Log:     func() []byte { return proctest.Tail(logPath) },
		Ready:   func() error { return pingOwn(s.Addr(), s.proc) },
		Probe:   "PING",
		Timeout: ReadyTimeout,
		// The first PING usually succeeds within a few milliseconds.
		Backoff: time.Millisecond,
	})
	err := s.proc.Launch(func() (err error) {
		s.port, err = proctest.FreePort()
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// dumpFile is the RDB snapshot in a server's directory.
const dumpFile = "dump.rdb"

// Addr is host:port of the server; it does not change across restarts.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Dir is the server's working directory (its log is redis.log there).
func (s *Server) Dir() string { return s.proc.Dir() }

// Stop kills the server with SIGKILL, as a crash would, and waits for it to
// exit. Its memory is gone; connected clients see connection resets.
func (s *Server) Stop() { s.proc.Stop() }

// Start restarts a stopped server on the same port: empty, or, for a
// NewPersistent server, with what its last Save wrote. It panics if the
// server cannot come back (a test cannot go on without it).
func (s *Server) Start() {
	if err := s.proc.Start(); err != nil {
		panic(fmt.Sprintf("redistest: restart on %s: %v", s.Addr(), err))
	}
}

// Save writes the server's snapshot (SAVE), which a persistent server
// loads when it is started again.
func (s *Server) Save() error {
	r, err := callString(s.Addr(), time.Minute, "SAVE")
	if err == nil && r != "OK" {
		err = fmt.Errorf("SAVE answered %q", r)
	}
	if err != nil {
		return fmt.Errorf("redistest: SAVE on %s: %w", s.Addr(), err)
	}
	return nil
}

// Crash kills the server with SIGKILL, as Stop does: it writes nothing on
// its way down, so the snapshot on disk stays what the last Save wrote.
func (s *Server) Crash() { s.proc.Stop() }

// Restart is Stop then Start: Redis losing its memory.
func (s *Server) Restart() {
	s.Stop()
	s.Start()
}

// Pause freezes the server (SIGSTOP): connections stay open but nothing is
// answered, which is how an overloaded or hung Redis looks to a client.
func (s *Server) Pause() { s.proc.Pause() }

// Resume undoes Pause.
func (s *Server) Resume() { s.proc.Resume() }

// Close kills the server for good and removes a directory Launch created.
func (s *Server) Close() { s.proc.Close() }

// pingOwn is ping, and then that the server answering is the child: two
// servers launched at once may pick the same free port, and the one that
// lost it exits while the other answers its PING.
func pingOwn(addr string, child *proctest.Child) error {
	if err := ping(addr); err != nil {
		return err
	}
	info, err := callString(addr, time.Second, "INFO", "server")
	if err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(child.Pid()) + "\r\n"
	if !strings.Contains(info, want) {
		return fmt.Errorf("%s is answered by another process than pid %d", addr, child.Pid())
	}
	return nil
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
