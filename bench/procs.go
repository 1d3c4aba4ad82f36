package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Procs owns every process bench starts for a run and stops them all, in
// reverse order, at the end (also on Ctrl-C: main cancels the run's
// context and the deferred StopAll runs). Children get their own process
// group (a Ctrl-C in the terminal reaches bench only, which stops them in
// order) and SIGKILL if bench dies without cleaning up (Pdeathsig).
type Procs struct {
	dir  string
	mu   sync.Mutex
	list []*Proc
}

// Proc is one child process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string
	done chan struct{}
	err  error
}

func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Exited reports whether the process has ended (and how).
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Tail is the end of the process's log, for error messages.
func (p *Proc) Tail() string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

func newProcs(dir string) *Procs { return &Procs{dir: dir} }

// Start runs bin with args; cpu >= 0 pins it (and its children) to that
// CPU with taskset. Output goes to DIR/name.log.
func (ps *Procs) Start(name string, cpu int, env []string, bin string, args ...string) (*Proc, error) {
	logPath := filepath.Join(ps.dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	if cpu >= 0 {
		args = append([]string{"-c", strconv.Itoa(cpu), bin}, args...)
		bin = "taskset"
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Dir = ps.dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

// Stop ends one process: SIGTERM to its group, SIGKILL after grace.
func (p *Proc) Stop(grace time.Duration) {
	if ok, _ := p.Exited(); ok {
		return
	}
	pid := p.Pid()
	syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	}
}

// StopAll stops every process, last started first.
func (ps *Procs) StopAll() {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		list[i].Stop(8 * time.Second)
	}
}

// freePort returns a loopback port nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func freeAddr() (string, error) {
	p, err := freePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

// waitFor polls ready every 50 ms until it returns nil, the process
// exits, or timeout passes.
func waitFor(ctx context.Context, p *Proc, what string, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = ready(); err == nil {
			return nil
		}
		if p != nil {
			if ok, werr := p.Exited(); ok {
				return fmt.Errorf("%s exited before it was ready (%v); its log %s ends:\n%s", what, werr, p.Log, p.Tail())
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %v", what, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tcpReady succeeds once addr accepts a connection.
func tcpReady(addr string) func() error {
	return func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
}

// --- /proc -----------------------------------------------------------------

const clkTck = 100 // USER_HZ on Linux

// cpuTicks is utime+stime of pid (clock ticks), 0 when it is gone.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the ")" of the command name: state is field 3.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// memKB reads VmRSS and VmHWM (peak RSS) of pid in kB.
func memKB(pid int) (rss, peak int64) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var v int64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			fmt.Sscanf(strings.TrimPrefix(line, "VmRSS:"), "%d", &v)
			rss = v
		case strings.HasPrefix(line, "VmHWM:"):
			fmt.Sscanf(strings.TrimPrefix(line, "VmHWM:"), "%d", &v)
			peak = v
		}
	}
	return rss, peak
}

// childPids lists the direct children of pid (nginx workers).
func childPids(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// machineTicks is the busy and total clock ticks of all CPUs so far.
func machineTicks() (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	var v [8]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
	}
	// user nice system idle iowait irq softirq steal
	busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	return busy, busy + v[3] + v[4]
}

// ProcWatch samples a process group's CPU over a window.
type ProcWatch struct {
	Name  string
	pids  func() []int
	t0    int64
	start time.Time
}

func watchProc(name string, pids func() []int) *ProcWatch {
	w := &ProcWatch{Name: name, pids: pids}
	w.Reset()
	return w
}

func (w *ProcWatch) ticks() int64 {
	var t int64
	for _, p := range w.pids() {
		t += cpuTicks(p)
	}
	return t
}

func (w *ProcWatch) Reset() { w.t0, w.start = w.ticks(), time.Now() }

// ProcStat is a process's share of the run.
type ProcStat struct {
	Name       string  `json:"name"`
	Pids       []int   `json:"pids"`
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUPct     float64 `json:"cpu_pct"` // of one CPU over the window
	RSSMB      float64 `json:"rss_mb"`
	PeakRSSMB  float64 `json:"peak_rss_mb"`
}

func (w *ProcWatch) Stat() ProcStat {
	pids := w.pids()
	s := ProcStat{Name: w.Name, Pids: pids}
	s.CPUSeconds = float64(w.ticks()-w.t0) / clkTck
	if el := time.Since(w.start).Seconds(); el > 0 {
		s.CPUPct = 100 * s.CPUSeconds / el
	}
	for _, p := range pids {
		r, pk := memKB(p)
		s.RSSMB += float64(r) / 1024
		s.PeakRSSMB += float64(pk) / 1024
	}
	return s
}

// --- tools and Debian packages --------------------------------------------

// Tool is an executable (or file) bench needs and the Debian package that
// ships it.
type Tool struct {
	Path    string // absolute path or a name looked up in PATH
	Package string
}

var (
	toolRedis       = Tool{"redis-server", "redis-server"}
	toolRedisBench  = Tool{"redis-benchmark", "redis-tools"}
	toolRedisCLI    = Tool{"redis-cli", "redis-tools"}
	toolNginx       = Tool{"/usr/sbin/nginx", "nginx"}
	toolNginxLua    = Tool{"/usr/lib/nginx/modules/ngx_http_lua_module.so", "libnginx-mod-http-lua"}
	toolNginxNDK    = Tool{"/usr/lib/nginx/modules/ndk_http_module.so", "libnginx-mod-http-ndk"}
	toolLuaRedis    = Tool{"/usr/share/lua/5.1/nginx/redis.lua", "lua-nginx-redis"}
	toolWrk         = Tool{"wrk", "wrk"}
	toolTaskset     = Tool{"taskset", "util-linux"}
	toolClickHouse  = Tool{"/usr/sbin/clickhouse-server", "clickhouse-server"}
	errMissingTools = errors.New("missing Debian packages")
)

func (t Tool) find() (string, bool) {
	if filepath.IsAbs(t.Path) {
		_, err := os.Stat(t.Path)
		return t.Path, err == nil
	}
	p, err := exec.LookPath(t.Path)
	if err != nil {
		for _, dir := range []string{"/usr/sbin", "/usr/bin", "/sbin"} {
			if _, err := os.Stat(filepath.Join(dir, t.Path)); err == nil {
				return filepath.Join(dir, t.Path), true
			}
		}
	}
	return p, err == nil
}

// need checks tools for a purpose and names the packages to install when
// some are missing. bench installs nothing itself.
func need(purpose string, tools ...Tool) error {
	var pkgs, what []string
	for _, t := range tools {
		if _, ok := t.find(); !ok {
			if !contains(pkgs, t.Package) {
				pkgs = append(pkgs, t.Package)
			}
			what = append(what, t.Path)
		}
	}
	if len(pkgs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s needs %s; install with: apt-get install -y %s",
		errMissingTools, purpose, strings.Join(what, ", "), strings.Join(pkgs, " "))
}

func toolPath(t Tool) string {
	p, _ := t.find()
	return p
}
