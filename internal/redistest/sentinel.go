package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flashgate/internal/proctest"
)

// SentinelMasterSet is the name the kit's sentinels monitor the master under.
const SentinelMasterSet = "flashgate"

// SentinelOptions secure a Sentinel setup.
type SentinelOptions struct {
	// Password is the master's and the replica's requirepass (and
	// masterauth, so either can replicate from the other after a
	// failover); the sentinels authenticate with it too (auth-pass).
	Password string
	// SentinelPassword is the sentinels' own requirepass, which they also
	// use with each other (sentinel-pass).
	SentinelPassword string
}

// Sentinel is one master, one replica and three sentinels (quorum 2) on
// free loopback ports, tuned so that a failover completes in a few seconds:
// a master is down after 1s without answers, a failover that stalls is
// retried after 4s. Every process is killed when the test ends.
type Sentinel struct {
	t    testing.TB
	opts SentinelOptions

	mu        sync.Mutex
	data      []*sentinelProc // master and replica, in start order
	sentinels []*sentinelProc
}

type sentinelProc struct {
	child  *proctest.Child
	port   int
	killed bool
	paused bool
}

func (p *sentinelProc) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// NewSentinel starts the setup without passwords and waits until every
// sentinel knows the master, the replica and the two other sentinels.
func NewSentinel(t testing.TB) *Sentinel { return NewSentinelWith(t, SentinelOptions{}) }

// NewSentinelWith is NewSentinel with passwords.
func NewSentinelWith(t testing.TB, opts SentinelOptions) *Sentinel {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		t.Fatal(MissingHint)
	}
	s := &Sentinel{t: t, opts: opts}
	t.Cleanup(s.close)
	dir := t.TempDir()
	master := s.startData(t, filepath.Join(dir, "master"), 0)
	replica := s.startData(t, filepath.Join(dir, "replica"), master.port)
	s.data = []*sentinelProc{master, replica}
	if err := s.awaitLinkUp(replica.addr(), ReadyTimeout); err != nil {
		t.Fatalf("redistest: replica %s never synced with master %s: %v", replica.addr(), master.addr(), err)
	}
	for i := range 3 {
		s.sentinels = append(s.sentinels, s.startSentinel(t, filepath.Join(dir, "sentinel"+strconv.Itoa(i+1)), master.port))
	}
	if err := s.awaitAcquainted(ReadyTimeout); err != nil {
		t.Fatalf("redistest: sentinels not ready: %v", err)
	}
	return s
}

// MasterSet is the name to give a Sentinel client.
func (s *Sentinel) MasterSet() string { return SentinelMasterSet }

// SentinelAddrs are the sentinels' host:port, killed ones included.
func (s *Sentinel) SentinelAddrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	addrs := make([]string, len(s.sentinels))
	for i, p := range s.sentinels {
		addrs[i] = p.addr()
	}
	return addrs
}

// Master is the master's host:port as the first sentinel that answers
// reports it (during a failover it may still name the old one).
func (s *Sentinel) Master() string {
	s.t.Helper()
	var last error
	for _, a := range s.liveSentinels() {
		m, err := s.masterFrom(a)
		if err == nil {
			return m
		}
		last = err
	}
	s.t.Fatalf("redistest: no sentinel names the master: %v", last)
	return ""
}

// Replica is the host:port of the server that is not the master (it may
// have been killed).
func (s *Sentinel) Replica() string {
	s.t.Helper()
	m := s.Master()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.data {
		if p.addr() != m {
			return p.addr()
		}
	}
	s.t.Fatalf("redistest: no server but the master %s", m)
	return ""
}

// Kill SIGKILLs the server or sentinel at addr; it stays dead.
func (s *Sentinel) Kill(addr string) {
	s.t.Helper()
	p := s.proc(addr)
	p.child.Stop()
	s.mu.Lock()
	p.killed, p.paused = true, false
	s.mu.Unlock()
}

// Pause freezes the server or sentinel at addr (SIGSTOP): connections stay
// open, nothing is answered. To the sentinels a paused master is a dead one.
func (s *Sentinel) Pause(addr string) {
	s.t.Helper()
	p := s.proc(addr)
	p.child.Pause()
	s.mu.Lock()
	p.paused = true
	s.mu.Unlock()
}

// Resume undoes Pause.
func (s *Sentinel) Resume(addr string) {
	s.t.Helper()
	p := s.proc(addr)
	p.child.Resume()
	s.mu.Lock()
	p.paused = false
	s.mu.Unlock()
}

// AwaitFailover waits until every sentinel still running names a master
// other than old, all the same one, and that server says it is a master;
// it returns its host:port, and fails the test after timeout.
func (s *Sentinel) AwaitFailover(old string, timeout time.Duration) string {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		m, err := s.agreedMaster()
		if err == nil && m == old {
			err = fmt.Errorf("the sentinels still name %s", old)
		}
		if err == nil {
			var role string
			if role, err = s.role(m); err == nil && role != "master" {
				err = fmt.Errorf("%s is named master but says it is %s", m, role)
			}
		}
		if err == nil {
			return m
		}
		last = err
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: no failover from %s within %v: %v\n%s", old, timeout, last, s.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LagFailover writes 48 MB while the replica is frozen: more than the
// kernel's socket buffers hold, less than the master's soft limit on a
// replica's output buffer (64 MB), so the master keeps the replica and holds
// the writes in its own memory, where kill -9 loses them.
const (
	sentinelLagKeys  = 48
	sentinelLagBytes = 1 << 20
)

// SentinelLagKey is the i-th key LagFailover writes (0 <= i < 48): the last
// ones are missing on the promoted replica.
func SentinelLagKey(i int) string { return "redistest:lag:" + strconv.Itoa(i) }

// LagFailover makes the master fail over onto a replica that lags it:
// SIGSTOP the replica, write ~48 MB to the master, kill -9 the master,
// SIGCONT the replica, await its promotion. Writes made since the replica
// was frozen (the filler, and whatever the test wrote meanwhile) are lost
// in part or in whole: the promoted replica holds older values of keys that
// still exist. It returns the new master's host:port.
func (s *Sentinel) LagFailover(timeout time.Duration) string {
	s.t.Helper()
	master, replica := s.Master(), s.Replica()
	s.Pause(replica)
	if err := s.fill(master); err != nil {
		s.Resume(replica)
		s.t.Fatalf("redistest: filling master %s: %v", master, err)
	}
	s.Kill(master)
	s.Resume(replica)
	return s.AwaitFailover(master, timeout)
}

// fill writes the filler in one pipeline and reads every reply.
func (s *Sentinel) fill(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	w := bufio.NewWriterSize(c, 1<<16)
	r := bufio.NewReader(c)
	n := 0
	if s.opts.Password != "" {
		sentinelWrite(w, "AUTH", s.opts.Password)
		n++
	}
	value := strings.Repeat("x", sentinelLagBytes)
	for i := range sentinelLagKeys {
		sentinelWrite(w, "SET", SentinelLagKey(i), value)
		n++
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for range n {
		if _, err := sentinelRead(r); err != nil {
			return err
		}
	}
	return nil
}

func (s *Sentinel) startData(t testing.TB, dir string, masterPort int) *sentinelProc {
	t.Helper()
	p := &sentinelProc{}
	logPath := filepath.Join(dir, "redis.log")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p.child = proctest.NewChild(dir, false, proctest.Spec{
		Name: func() string { return fmt.Sprintf("redis-server on port %d", p.port) },
		Command: func() *exec.Cmd {
			// The same server as New's, plus fast replication.
			args := []string{
				"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no", "--daemonize", "no",
				"--dir", dir, "--logfile", logPath,
				"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
			}
			if s.opts.Password != "" {
				args = append(args, "--requirepass", s.opts.Password, "--masterauth", s.opts.Password)
			}
			if masterPort != 0 {
				args = append(args, "--replicaof", "127.0.0.1", strconv.Itoa(masterPort))
			}
			return exec.Command(Binary, args...)
		},
		Fresh:   []string{logPath},
		Log:     func() []byte { return proctest.Tail(logPath) },
		Ready:   func() error { return s.ping(p.addr(), s.opts.Password) },
		Probe:   "PING",
		Timeout: ReadyTimeout,
		Backoff: time.Millisecond,
	})
	s.launch(t, p)
	return p
}

func (s *Sentinel) startSentinel(t testing.TB, dir string, masterPort int) *sentinelProc {
	t.Helper()
	p := &sentinelProc{}
	logPath := filepath.Join(dir, "sentinel.log")
	confPath := filepath.Join(dir, "sentinel.conf")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p.child = proctest.NewChild(dir, false, proctest.Spec{
		Name: func() string { return fmt.Sprintf("redis-sentinel on port %d", p.port) },
		Command: func() *exec.Cmd {
			// A sentinel rewrites its file (what it learned, its id), so
			// every start gets a fresh one.
			_ = os.WriteFile(confPath, []byte(s.sentinelConf(p.port, dir, logPath, masterPort)), 0o644)
			return exec.Command(Binary, confPath, "--sentinel")
		},
		Fresh:   []string{logPath},
		Log:     func() []byte { return proctest.Tail(logPath) },
		Ready:   func() error { return s.ping(p.addr(), s.opts.SentinelPassword) },
		Probe:   "PING",
		Timeout: ReadyTimeout,
		Backoff: time.Millisecond,
	})
	s.launch(t, p)
	return p
}

func (s *Sentinel) sentinelConf(port int, dir, logPath string, masterPort int) string {
	m := SentinelMasterSet
	lines := []string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"daemonize no",
		"dir " + dir,
		"logfile " + logPath,
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", m, masterPort),
		"sentinel down-after-milliseconds " + m + " 1000",
		// Also the pause before a stalled failover is tried again
		// (twice this): short, so that a replica that was not yet
		// eligible (LagFailover's, just resumed) is promoted soon after.
		"sentinel failover-timeout " + m + " 2000",
		"sentinel parallel-syncs " + m + " 1",
	}
	if s.opts.Password != "" {
		lines = append(lines, "sentinel auth-pass "+m+" "+s.opts.Password)
	}
	if s.opts.SentinelPassword != "" {
		lines = append(lines, "requirepass "+s.opts.SentinelPassword, "sentinel sentinel-pass "+s.opts.SentinelPassword)
	}
	return strings.Join(lines, "\n") + "\n"
}

func (s *Sentinel) launch(t testing.TB, p *sentinelProc) {
	t.Helper()
	if err := p.child.Launch(func() (err error) {
		p.port, err = proctest.FreePort()
		return err
	}); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

func (s *Sentinel) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range slices.Concat(s.sentinels, s.data) {
		p.child.Close()
	}
}

func (s *Sentinel) proc(addr string) *sentinelProc {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range slices.Concat(s.data, s.sentinels) {
		if p.addr() == addr {
			return p
		}
	}
	s.t.Fatalf("redistest: %s is no process of this Sentinel setup", addr)
	return nil
}

func (s *Sentinel) liveSentinels() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var addrs []string
	for _, p := range s.sentinels {
		if !p.killed && !p.paused {
			addrs = append(addrs, p.addr())
		}
	}
	return addrs
}

func (s *Sentinel) masterFrom(sentinel string) (string, error) {
	r, err := sentinelDo(sentinel, s.opts.SentinelPassword, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMasterSet)
	if err != nil {
		return "", err
	}
	hp, ok := r.([]any)
	if !ok || len(hp) != 2 {
		return "", fmt.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME answered %v", sentinel, r)
	}
	host, _ := hp[0].(string)
	port, _ := hp[1].(string)
	return net.JoinHostPort(host, port), nil
}

// agreedMaster is the master every running sentinel names.
func (s *Sentinel) agreedMaster() (string, error) {
	live := s.liveSentinels()
	if len(live) == 0 {
		return "", errors.New("no sentinel running")
	}
	var names []string
	for _, a := range live {
		m, err := s.masterFrom(a)
		if err != nil {
			return "", err
		}
		names = append(names, a+" names "+m)
		if len(names) > 1 && !strings.HasSuffix(names[0], " "+m) {
			return "", fmt.Errorf("the sentinels disagree: %s", strings.Join(names, ", "))
		}
	}
	m, _ := s.masterFrom(live[0])
	return m, nil
}

func (s *Sentinel) role(addr string) (string, error) {
	r, err := sentinelDo(addr, s.opts.Password, "ROLE")
	if err != nil {
		return "", err
	}
	if a, ok := r.([]any); ok && len(a) > 0 {
		if role, ok := a[0].(string); ok {
			return role, nil
		}
	}
	return "", fmt.Errorf("%s: ROLE answered %v", addr, r)
}

// awaitLinkUp waits until the replica has synced with its master.
func (s *Sentinel) awaitLinkUp(replica string, timeout time.Duration) error {
	return s.poll(timeout, func() error {
		r, err := sentinelDo(replica, s.opts.Password, "INFO", "replication")
		if err != nil {
			return err
		}
		if info, _ := r.(string); !strings.Contains(info, "master_link_status:up") {
			return errors.New("master_link_status is not up")
		}
		return nil
	})
}

// awaitAcquainted waits until every sentinel monitors the master with one
// replica and two other sentinels: only then can two of them agree.
func (s *Sentinel) awaitAcquainted(timeout time.Duration) error {
	return s.poll(timeout, func() error {
		for _, a := range s.liveSentinels() {
			r, err := sentinelDo(a, s.opts.SentinelPassword, "SENTINEL", "MASTER", SentinelMasterSet)
			if err != nil {
				return err
			}
			m := sentinelPairs(r)
			if m["flags"] != "master" || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return fmt.Errorf("sentinel %s: flags %s, %s replicas, %s other sentinels",
					a, m["flags"], m["num-slaves"], m["num-other-sentinels"])
			}
		}
		return nil
	})
}

func (s *Sentinel) poll(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w\n%s", err, s.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logs are the tails of the sentinels' logs, for a failure message.
func (s *Sentinel) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, p := range s.sentinels {
		fmt.Fprintf(&b, "--- sentinel %s:\n%s\n", p.addr(), proctest.Tail(filepath.Join(p.child.Dir(), "sentinel.log")))
	}
	return b.String()
}

func (s *Sentinel) ping(addr, password string) error {
	r, err := sentinelDo(addr, password, "PING")
	if err != nil {
		return err
	}
	if r != "PONG" {
		return fmt.Errorf("PING answered %v", r)
	}
	return nil
}

// sentinelDo sends one command (after AUTH when password is set) on a fresh
// connection and returns its reply: a string, an int64, nil, or a []any of
// those; a server error is an error. RESP2 is all a sentinel needs, and
// this package stays free of a client library's handshake and reconnects.
func sentinelDo(addr, password string, args ...string) (any, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	w, r := bufio.NewWriter(c), bufio.NewReader(c)
	if password != "" {
		sentinelWrite(w, "AUTH", password)
	}
	sentinelWrite(w, args...)
	if err := w.Flush(); err != nil {
		return nil, err
	}
	if password != "" {
		if _, err := sentinelRead(r); err != nil {
			return nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	return sentinelRead(r)
}

func sentinelWrite(w *bufio.Writer, args ...string) {
	fmt.Fprintf(w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(w, "$%d\r\n%s\r\n", len(a), a)
	}
}

func sentinelRead(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, errors.New(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		a := make([]any, n)
		for i := range a {
			if a[i], err = sentinelRead(r); err != nil {
				return nil, err
			}
		}
		return a, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}

// sentinelPairs reads a flat key, value, key, value ... reply as a map.
func sentinelPairs(r any) map[string]string {
	m := map[string]string{}
	a, _ := r.([]any)
	for i := 0; i+1 < len(a); i += 2 {
		k, _ := a[i].(string)
		v, _ := a[i+1].(string)
		m[k] = v
	}
	return m
}
