package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"

	"flashgate/internal/await"
)

// The plain paths over real loopback sockets, as bench compare measures
// them but inside one test binary: the server under test runs in the
// benchmark's process (GOMAXPROCS=1, like bench's edge), and the load — 64
// kept-alive connections, one request in flight on each, like `wrk -t1
// -c64` — comes from a child process (this test binary again, running
// TestLoopbackChild), as does the trivial origin of the proxied path. So
// the process's CPU time (getrusage) is the server's own: cpu-ns/op is
// what one answer cost it, system calls and the runtime's poller included,
// and `-cpuprofile` profiles the server alone.
//
//	nice -n 19 go test -run '^$' -bench Loopback -benchtime 100000x -count 4 ./proxy/
//
// FG_LOOPBACK_CONNS sets the number of connections (64). With
// FG_LOOPBACK_PIN=1 (the default when the machine has two CPUs or more) the
// server's threads run on CPU 1 and the child on CPU 0, as bench compare
// pins them. Compare server=edge with server=bare (or nginx) of the same
// run: the absolute numbers follow the machine's load.

// loopbackConns is the number of connections the load keeps busy: wrk's
// -c64, or FG_LOOPBACK_CONNS (1: a server that waits for every request).
func loopbackConns() int {
	if n, err := strconv.Atoi(os.Getenv("FG_LOOPBACK_CONNS")); err == nil && n > 0 {
		return n
	}
	return 64
}

// TestLoopbackChild is the child side of the loopback benchmarks; it does
// nothing unless FG_LOOPBACK_CHILD names its role.
func TestLoopbackChild(t *testing.T) {
	switch os.Getenv("FG_LOOPBACK_CHILD") {
	case "":
		t.Skip("the loopback benchmarks' child process")
	case "load":
		if err := childLoad(); err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			os.Exit(1)
		}
	case "origin":
		childOrigin()
	}
	os.Exit(0)
}

// childOrigin serves bench/origin's answer (JSON, X-Origin, a 256-byte
// body) on a port it prints, until its stdin closes.
func childOrigin() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	body := []byte(`{"origin":"bench","pad":"` + strings.Repeat("x", 256-28) + `"}`)
	contentJSON, hdrOrigin, valOrigin := []byte("application/json"), []byte("X-Origin"), []byte("flashgate-bench")
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.Response.Header.SetContentTypeBytes(contentJSON)
			ctx.Response.Header.SetBytesKV(hdrOrigin, valOrigin)
			ctx.Response.SetBodyRaw(body)
		},
		Name: "bench-origin", IdleTimeout: 5 * time.Minute, Concurrency: 1 << 18,
	}
	go srv.Serve(ln)
	fmt.Println(ln.Addr().String())
	io.Copy(io.Discard, os.Stdin)
}

// childLoad sends FG_LB_N copies of the request in FG_LB_REQFILE to
// FG_LB_ADDR over loopbackConns() connections, one in flight on each, and
// fails unless every answer has the status FG_LB_STATUS.
func childLoad() error {
	req, err := os.ReadFile(os.Getenv("FG_LB_REQFILE"))
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(os.Getenv("FG_LB_N"))
	addr, want := os.Getenv("FG_LB_ADDR"), []byte("HTTP/1.1 "+os.Getenv("FG_LB_STATUS")+" ")
	conns := make([]net.Conn, loopbackConns())
	for i := range conns {
		if conns[i], err = net.Dial("tcp", addr); err != nil {
			return err
		}
	}
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			br := bufio.NewReaderSize(c, 16<<10)
			for left.Add(-1) >= 0 {
				if _, err := c.Write(req); err != nil {
					errs <- err
					return
				}
				if err := readAnswer(br, want); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	// The parent's io accounting takes in its reaped children's: say what
	// to take out.
	r, w := syscallsIO(nil)
	fmt.Println(r, w)
	return nil
}

// readAnswer reads one HTTP/1.1 answer framed by Content-Length and checks
// its status line starts with want.
func readAnswer(br *bufio.Reader, want []byte) error {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, want) {
		return fmt.Errorf("answer %q, want %q", line, want)
	}
	size := -1
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
			size, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	if size < 0 {
		return errors.New("answer without Content-Length")
	}
	_, err = br.Discard(size)
	return err
}

// loopbackPin says whether the server and the child run on CPUs of their own.
func loopbackPin() bool {
	if v := os.Getenv("FG_LOOPBACK_PIN"); v != "" {
		return v == "1"
	}
	return runtime.NumCPU() >= 2
}

// childCmd is this test binary as the loopback child of role, on CPU 0
// when pinned.
func childCmd(role string, env ...string) *exec.Cmd {
	args := []string{"-test.run=^TestLoopbackChild$", "-test.count=1"}
	var cmd *exec.Cmd
	if loopbackPin() {
		cmd = exec.Command("taskset", append([]string{"-c", "0", os.Args[0]}, args...)...)
	} else {
		cmd = exec.Command(os.Args[0], args...)
	}
	cmd.Env = append(os.Environ(), append([]string{"FG_LOOPBACK_CHILD=" + role, "GOMAXPROCS=1"}, env...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

// startChildOrigin starts the origin child and returns its address.
func startChildOrigin(tb testing.TB) string {
	tb.Helper()
	cmd := childCmd("origin")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { stdin.Close(); cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(addr)
}

// pinProcess puts every thread of this process on cpu (threads made later
// inherit it from the thread that makes them) and returns the undo.
func pinProcess(tb testing.TB, cpu int) func() {
	tb.Helper()
	var set, all unix.CPUSet
	set.Set(cpu)
	for i := range runtime.NumCPU() {
		all.Set(i)
	}
	each := func(s *unix.CPUSet) {
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, t := range tasks {
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				unix.SchedSetaffinity(tid, s) // a thread that just ended: nothing to pin
			}
		}
	}
	each(&set)
	return func() { each(&all) }
}

// serveLoopback sends b.N copies of req to addr from the load child and
// reports the CPU time this process spent per answer (cpu-ns/op).
// serverPids, when given, are measured instead of this process (a peer
// such as nginx).
func serveLoopback(b *testing.B, addr, req, wantStatus string, serverPids ...int) {
	b.Helper()
	reqFile := filepath.Join(b.TempDir(), "req")
	if err := os.WriteFile(reqFile, []byte(req), 0o644); err != nil {
		b.Fatal(err)
	}
	// run returns the load child's own read and write system calls.
	run := func(n int) (reads, writes int64) {
		cmd := childCmd("load", "FG_LB_ADDR="+addr, "FG_LB_REQFILE="+reqFile, "FG_LB_N="+strconv.Itoa(n), "FG_LB_STATUS="+wantStatus)
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("load: %v %s", err, out)
		}
		if _, err := fmt.Sscan(string(out), &reads, &writes); err != nil {
			b.Fatalf("load's io: %q", out)
		}
		return reads, writes
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if loopbackPin() && len(serverPids) == 0 {
		defer pinProcess(b, 1)()
	}
	run(2 * loopbackConns()) // connections' first requests, pools warm
	b.ResetTimer()
	cpu0 := serverCPU(serverPids)
	r0, w0 := syscallsIO(serverPids)
	cr, cw := run(b.N)
	cpu := serverCPU(serverPids) - cpu0
	r1, w1 := syscallsIO(serverPids)
	if len(serverPids) == 0 {
		// This process's io counts include the child's, reaped.
		r1, w1 = r1-cr, w1-cw
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(r1-r0)/float64(b.N), "reads/op")
	b.ReportMetric(float64(w1-w0)/float64(b.N), "writes/op")
}

// serverCPU is this process's user and system CPU time, or that of pids
// (from /proc, in clock ticks of 10 ms) when given.
func serverCPU(pids []int) time.Duration {
	if len(pids) == 0 {
		return processCPU()
	}
	var total time.Duration
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(u+s) * 10 * time.Millisecond
	}
	return total
}

// syscallsIO is the number of read and write system calls this process
// (or pids) made so far, from /proc's io accounting: the reads that found
// nothing (EAGAIN) count too.
func syscallsIO(pids []int) (reads, writes int64) {
	if len(pids) == 0 {
		pids = []int{os.Getpid()}
	}
	for _, pid := range pids {
		io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(io)) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "syscr":
				reads += n
			case "syscw":
				writes += n
			}
		}
	}
	return reads, writes
}

// listenBare serves h as bench's barefasthttp does, on a plain listener.
func listenBare(tb testing.TB, h fasthttp.RequestHandler) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := barePeer(h)
	go s.Serve(ln)
	tb.Cleanup(func() { s.Shutdown() })
	return ln.Addr().String()
}

// soldOutRequest is wrk's request of bench compare's soldout target.
func soldOutRequest(jwt string) string {
	body := `{"productId":"p1","token":"` + strings.Repeat("t", 120) + `","quantity":1}`
	return "POST /api/seckill/do HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\nAuthorization: Bearer " + jwt +
		"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// BenchmarkLoopbackSoldOut: the sold-out answer of the edge's whole chain
// (bench compare's edge config) against barefasthttp's same bytes.
func BenchmarkLoopbackSoldOut(b *testing.B) {
	e, jwt := soldOutEdge(b, benchEdgeChain)
	req := soldOutRequest(jwt)
	soldOut := []byte(`{"code":"SOLD_OUT","message":"sold out"}`)
	contentJSON, noStore := []byte("application/json"), []byte("no-store")
	bare := listenBare(b, func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(fasthttp.StatusGone)
		ctx.Response.Header.SetContentTypeBytes(contentJSON)
		ctx.Response.Header.SetBytesV(fasthttp.HeaderCacheControl, noStore)
		ctx.SetBody(soldOut)
	})
	edgeAddr := strings.TrimPrefix(e.base, "http://")
	b.Run("server=edge", func(b *testing.B) { serveLoopback(b, edgeAddr, req, "410") })
	b.Run("server=bare", func(b *testing.B) { serveLoopback(b, bare, req, "410") })
}

// BenchmarkLoopbackProxied: GET /items/p1 through the edge's chain to an
// origin in the child process (bench compare's proxy target).
func BenchmarkLoopbackProxied(b *testing.B) {
	origin := startChildOrigin(b)
	e := startEdge(b, fmt.Sprintf(benchEdgeChain, allocSecret, origin))
	req := "GET /items/p1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
	edgeAddr := strings.TrimPrefix(e.base, "http://")
	ngAddr, ngPids := startNginx(b, origin)
	b.Run("server=edge", func(b *testing.B) { serveLoopback(b, edgeAddr, req, "200") })
	b.Run("server=nginx", func(b *testing.B) { serveLoopback(b, ngAddr, req, "200", ngPids...) })
}

// loopbackNginx is bench's nginx peer of the proxied path
// (bench/peers/nginx-edge.conf's location /, limits on).
const loopbackNginx = `worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    client_body_temp_path %[1]s/tmp;
    proxy_temp_path %[1]s/tmp;
    fastcgi_temp_path %[1]s/tmp;
    uwsgi_temp_path %[1]s/tmp;
    scgi_temp_path %[1]s/tmp;
    limit_req_zone $binary_remote_addr zone=ip:10m rate=1000000r/s;
    limit_conn_zone $binary_remote_addr zone=conn:10m;
    upstream origin {
        server %[2]s;
        keepalive 256;
        keepalive_requests 1000000;
        keepalive_timeout 60s;
    }
    server {
        listen %[3]s backlog=4096;
        limit_req zone=ip burst=1000000 nodelay;
        limit_conn conn 65535;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Real-IP $remote_addr;
            proxy_set_header X-Forwarded-Proto $scheme;
        }
    }
}
`

// startNginx runs nginx (one worker) proxying to origin and returns its
// address and its processes' ids; it skips when nginx is not installed.
func startNginx(b *testing.B, origin string) (string, []int) {
	b.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		b.Skip("no nginx")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := b.TempDir()
	os.Mkdir(filepath.Join(dir, "tmp"), 0o755)
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(loopbackNginx, dir, origin, addr)), 0o644); err != nil {
		b.Fatal(err)
	}
	args := []string{bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")}
	if loopbackPin() {
		args = append([]string{"taskset", "-c", "1"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Signal(unix.SIGQUIT); cmd.Wait() })
	var pids []int
	await.Until(b, 10*time.Second, "nginx's listener and worker", func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		c.Close()
		// The master and its worker, the master's child.
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		pids = []int{cmd.Process.Pid}
		for _, f := range strings.Fields(string(kids)) {
			pid, _ := strconv.Atoi(f)
			pids = append(pids, pid)
		}
		return len(pids) > 1
	})
	return addr, pids
}

// BenchmarkLoopbackPage: GET /seckill/p1, the sale page, against a bare
// fasthttp handler writing the edge's own bytes and headers.
func BenchmarkLoopbackPage(b *testing.B) {
	e, _ := soldOutEdge(b, benchEdgeChain)
	bare := listenBare(b, pageHandler(e))
	req := "GET /seckill/p1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
	edgeAddr := strings.TrimPrefix(e.base, "http://")
	b.Run("server=edge", func(b *testing.B) { serveLoopback(b, edgeAddr, req, "200") })
	b.Run("server=bare", func(b *testing.B) { serveLoopback(b, bare, req, "200") })
}
