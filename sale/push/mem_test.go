package push_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"flashgate/conf"
	"flashgate/orders/stock"
	"flashgate/sale/push"
)

var memStreams = flag.Int("push.streams", 10_000, "streams BenchmarkStreamMemory opens")

// The child process that holds the client ends, so that the parent's
// memory figures are the edge's alone (and each side has its own fd limit).
const clientsEnv = "PUSH_MEM_CLIENTS" // addr,product,firstID,n

// TestHelperStreamClients is not a test: the memory measurements run the
// test binary again with clientsEnv set, and this opens the streams, says
// READY when each has received its first event, and holds them until its
// stdin closes.
func TestHelperStreamClients(t *testing.T) {
	spec := os.Getenv(clientsEnv)
	if spec == "" {
		t.Skip("helper process for the memory measurements")
	}
	f := strings.Split(spec, ",")
	addr, product := f[0], f[1]
	first, _ := strconv.ParseInt(f[2], 10, 64)
	n, _ := strconv.Atoi(f[3])
	if err := raiseFDLimit(n + 100); err != nil {
		fmt.Println("ERROR", err)
		return
	}
	conns := make([]net.Conn, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 128)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := dialStream(addr, product, first+int64(i), memUser(i))
			if err != nil {
				errs <- err
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		fmt.Println("ERROR", err)
		return
	}
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}

func memUser(i int) string { return "m" + strconv.Itoa(i) }

// dialStream opens one stream and reads up to its first event.
func dialStream(addr, product string, id int64, user string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	req := "GET /api/seckill/events?orderId=" + strconv.FormatInt(id, 10) + "&productId=" + product +
		" HTTP/1.1\r\nHost: edge\r\n" + testUserHeader + ": " + user + "\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReaderSize(c, 1024)
	line, err := r.ReadString('\n')
	if err != nil || !strings.Contains(line, " 200 ") {
		c.Close()
		return nil, fmt.Errorf("stream %d: %q %v", id, line, err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			c.Close()
			return nil, err
		}
		if strings.HasPrefix(line, "data: ") {
			break
		}
	}
	c.SetReadDeadline(time.Time{})
	return c, nil
}

// raiseFDLimit lifts the soft open-file limit to the hard one if need be.
func raiseFDLimit(need int) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return err
	}
	if rl.Cur >= uint64(need) {
		return nil
	}
	if rl.Max < uint64(need) {
		return fmt.Errorf("open-file limit %d (hard) is below the %d this needs", rl.Max, need)
	}
	rl.Cur = rl.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
}

type memResult struct {
	heapStack, other float64 // bytes per stream
	settled          time.Duration
}

// measure opens n streams from a child process against an edge in this
// process and returns the growth of HeapInuse+StackInuse per stream once
// fasthttp's idle workers from the burst have exited (they would within
// MaxIdleWorkerDuration, 10s by default; 100ms here), and of the runtime's
// other memory (poll descriptors live there).
func measure(tb testing.TB, n int, blocking bool) memResult {
	if err := raiseFDLimit(n + 200); err != nil {
		tb.Skipf("cannot open %d streams: %v", n, err)
	}
	e := newEnv(tb, envOpts{blocking: blocking, maxIdleWorker: 100 * time.Millisecond,
		events: func(c *conf.EventsConfig) { c.MaxStreams, c.Deadline, c.Heartbeat = n+10, 10*time.Minute, time.Minute }})
	first := nextID()
	idSeq.Add(int64(n))
	c := e.raw
	cmds := make(rueidis.Commands, 0, n)
	for i := range n {
		cmds = append(cmds, c.B().Hset().Key(stock.OrderKey("mem", first+int64(i))).FieldValue().
			FieldValue("state", "pending").FieldValue("user", memUser(i)).FieldValue("qty", "1").
			FieldValue("price", "990").FieldValue("created", "1767225600000").Build())
	}
	for _, r := range c.DoMulti(context.Background(), cmds...) {
		if err := r.Error(); err != nil {
			tb.Fatal(err)
		}
	}
	// Run the path once, so that pools and tables exist in the baseline.
	warmID := nextID()
	e.order("mem", warmID, "warm", stock.StatePending)
	warm, err := dialStream(e.addr, "mem", warmID, "warm")
	if err != nil {
		tb.Fatal(err)
	}
	e.publishStored("mem", warmID)
	e.waitStats(5*time.Second, "warm-up stream ended", func(s push.Stats) bool { return s.Open == 0 })
	warm.Close()
	baseG := settleGoroutines(runtime.NumGoroutine(), 0)
	before := memNow()

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStreamClients$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d,%d", clientsEnv, e.addr, "mem", first, n))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	out := bufio.NewScanner(stdout)
	ready := false
	for out.Scan() {
		if line := out.Text(); line == "READY" {
			ready = true
			break
		} else if strings.HasPrefix(line, "ERROR") {
			tb.Fatalf("client process: %s", line)
		}
	}
	if !ready {
		tb.Fatal("client process ended before READY")
	}
	if got := e.hub.Stats().Open; got != int64(n) {
		tb.Fatalf("%d streams open, want %d", got, n)
	}
	start := time.Now()
	held := 0
	if blocking {
		held = n // each hijack handler waits
	}
	g := settleGoroutines(baseG, held)
	after := memNow()
	if !blocking && g > baseG+50 {
		tb.Fatalf("%d goroutines with %d parked streams (baseline %d): streams hold goroutines", g, n, baseG)
	}
	return memResult{
		heapStack: float64(int64(after.heapStack)-int64(before.heapStack)) / float64(n),
		other:     float64(int64(after.other)-int64(before.other)) / float64(n),
		settled:   time.Since(start),
	}
}

type memSample struct{ heapStack, other uint64 }

func memNow() memSample {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memSample{heapStack: m.HeapInuse + m.StackInuse, other: m.OtherSys + m.MSpanInuse + m.MCacheInuse + m.GCSys}
}

// settleGoroutines waits (at most 5s) until the goroutine count stops
// falling towards base+held: the burst's idle fasthttp workers exit on
// their own schedule, and there is nothing to block on.
func settleGoroutines(base, held int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		g := runtime.NumGoroutine()
		if g <= base+held+20 || time.Now().After(deadline) {
			return g
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMemoryPerStream holds the design's budget: ≤ 16 KB per open stream
// in the edge process, with the connection parked (KeepHijackedConns).
func TestMemoryPerStream(t *testing.T) {
	if testing.Short() {
		t.Skip("opens thousands of connections")
	}
	const n = 3000
	r := measure(t, n, false)
	t.Logf("%d parked streams: %.0f B/stream heap+stack, %.0f B/stream other runtime memory", n, r.heapStack, r.other)
	if r.heapStack > 16<<10 {
		t.Fatalf("%.0f B per stream, budget 16384", r.heapStack)
	}
}

// BenchmarkStreamMemory reports memory per open stream for -push.streams
// streams, with the connection parked in the hub and with the hijack
// handler waiting (a fasthttp.Server without KeepHijackedConns). The
// streams are opened once per sub-benchmark, whatever b.N.
func BenchmarkStreamMemory(b *testing.B) {
	for _, mode := range []struct {
		name     string
		blocking bool
	}{{"parked", false}, {"blocking", true}} {
		b.Run(mode.name, func(b *testing.B) {
			r := measure(b, *memStreams, mode.blocking)
			for b.Loop() {
			}
			b.ReportMetric(r.heapStack, "B/stream")
			b.ReportMetric(r.other, "other-B/stream")
			b.Logf("%d %s streams: %.0f B/stream (HeapInuse+StackInuse), %.0f B/stream other runtime memory",
				*memStreams, mode.name, r.heapStack, r.other)
		})
	}
}
