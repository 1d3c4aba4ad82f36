package proctest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ErrBind is a start that failed because the server's port was taken.
var ErrBind = errors.New("port already in use")

// FreePorts returns n distinct loopback ports nothing listens on right now.
// Someone else may take one before the server binds it: Child.Launch picks
// again when that happens.
func FreePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// FreePort is FreePorts(1).
func FreePort() (int, error) {
	p, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// Tail is the last 2000 bytes of a log file, trimmed ("" if it is missing).
func Tail(path string) []byte {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return bytes.TrimSpace(b)
}

// ForTest launches a server in t.TempDir() and closes it when the test
// ends; it fails the test, naming pkg, when the server does not start.
func ForTest[S interface{ Close() }](t testing.TB, pkg string, launch func(dir string, own bool) (S, error)) S {
	t.Helper()
	s, err := launch(t.TempDir(), false)
	if err != nil {
		t.Fatalf("%s: %v", pkg, err)
	}
	t.Cleanup(s.Close)
	return s
}

// InDir launches a server outside any test (for TestMain) in dir or, for
// dir "", in a fresh temporary directory named prefix*: launch is told it
// owns that directory (its Close removes it), and InDir removes it when
// launch fails.
func InDir[S any](dir, prefix string, launch func(dir string, own bool) (S, error)) (S, error) {
	own := false
	if dir == "" {
		d, err := os.MkdirTemp("", prefix)
		if err != nil {
			var zero S
			return zero, err
		}
		dir, own = d, true
	}
	s, err := launch(dir, own)
	if err != nil && own {
		os.RemoveAll(dir)
	}
	return s, err
}

// Spec says how to run one server and how to tell it is ready. Its funcs
// are called on every start, so they may read ports picked since.
type Spec struct {
	// Name is the server in error messages, e.g. "redis-server on port 1234".
	Name func() string
	// Command is a fresh command for one start.
	Command func() *exec.Cmd
	// Output, if set, is a file that gets the child's stdout and stderr,
	// truncated on every start.
	Output string
	// Fresh are files removed before every start (the previous run's
	// logs), so that Log speaks of this run only.
	Fresh []string
	// Log is the tail of the server's logs, for errors; a log that says
	// "Address already in use" makes the start fail with ErrBind.
	Log func() []byte
	// Ready returns nil once the server answers Probe.
	Ready func() error
	Probe string
	// Timeout bounds how long a start waits for Ready.
	Timeout time.Duration
	// Backoff is the first interval between Ready polls; it doubles up to
	// 50ms.
	Backoff time.Duration
}

// Child is one server child process. Its directory stays the same across
// Stop/Start; Close removes it when the child owns it.
type Child struct {
	spec   Spec
	dir    string
	ownDir bool

	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{} // closed when cmd has been reaped
	closed    bool
	startTook time.Duration
}

// NewChild prepares a child in dir (removed by Close when own); nothing
// runs until Launch.
func NewChild(dir string, own bool, spec Spec) *Child {
	return &Child{spec: spec, dir: dir, ownDir: own}
}

// Launch starts the server for the first time: pick chooses its ports
// (and writes whatever config names them), then it starts. A port picked
// by listening on :0 can be taken by someone else before the server binds
// it, so a start that fails with ErrBind picks again, up to 5 times.
func (c *Child) Launch(pick func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	for range 5 {
		if err = pick(); err != nil {
			return err
		}
		if err = c.start(); err == nil || !errors.Is(err, ErrBind) {
			return err
		}
	}
	return err
}

// Pid is the running child's process id, 0 when none runs. A Ready check
// compares it with what answered: a child that lost its port to another
// server would otherwise be "ready" through that server's answer.
func (c *Child) Pid() int {
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Dir is the child's directory.
func (c *Child) Dir() string { return c.dir }

// StartTook is how long the last (re)start took until the server was ready.
func (c *Child) StartTook() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startTook
}

// Stop kills the server with SIGKILL, as a crash would, and waits for it
// to exit.
func (c *Child) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kill()
}

// Start restarts a stopped server (on the same ports); it does nothing if
// the server runs.
func (c *Child) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		return nil
	}
	return c.start()
}

// Pause freezes the server (SIGSTOP): connections stay open but nothing
// is answered, which is how a hung server looks to a client.
func (c *Child) Pause() { c.signal(syscall.SIGSTOP) }

// Resume undoes Pause.
func (c *Child) Resume() { c.signal(syscall.SIGCONT) }

// Close kills the server for good and removes a directory the child owns.
// It may be called more than once.
func (c *Child) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.kill()
	if c.ownDir {
		os.RemoveAll(c.dir)
	}
}

func (c *Child) signal(sig syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		_ = c.cmd.Process.Signal(sig)
	}
}

func (c *Child) kill() {
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Kill() // SIGKILL also ends a SIGSTOPped process
	<-c.exited
	c.cmd = nil
}

func (c *Child) start() error {
	if c.closed {
		return errors.New("server closed")
	}
	sp := c.spec
	for _, f := range sp.Fresh {
		_ = os.Remove(f)
	}
	t0 := time.Now()
	cmd := sp.Command()
	if sp.Output != "" {
		out, err := os.Create(sp.Output)
		if err != nil {
			return err
		}
		defer out.Close() // the child has its own copy
		cmd.Stdout, cmd.Stderr = out, out
	}
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	c.cmd, c.exited = cmd, exited

	deadline := t0.Add(sp.Timeout)
	backoff := sp.Backoff
	for {
		if sp.Ready() == nil {
			c.startTook = time.Since(t0)
			return nil
		}
		select {
		case <-exited:
			c.cmd = nil
			log := sp.Log()
			if bytes.Contains(log, []byte("Address already in use")) {
				return ErrBind
			}
			return fmt.Errorf("%s exited: %s", sp.Name(), log)
		default:
		}
		if time.Now().After(deadline) {
			c.kill()
			return fmt.Errorf("%s did not answer %s within %v: %s", sp.Name(), sp.Probe, sp.Timeout, sp.Log())
		}
		// Polling the readiness condition with a capped backoff: servers
		// usually answer within milliseconds to a few hundred.
		time.Sleep(backoff)
		backoff = min(backoff*2, 50*time.Millisecond)
	}
}
