package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/internal/edgetest"
	"flashgate/internal/stocktest"
	"flashgate/internal/syncbuf"
	"flashgate/orders/consumer"
	"flashgate/orders/orderstore"
	"flashgate/proxy"
	"flashgate/sale/push"
)

// The push tests (push_*_test.go) prove the event stream of issue #7 on
// real edges: proxy.Server with its whole filter chain, sale and push hub,
// a real redis-server, a kfake broker and the real order consumer
// (consumer.Consumer) publishing every stored batch, as `proxy orders` and
// the in-edge consumer do.

// pushEdge is an edge with the event stream: proxy.Server's handler on a
// fasthttp.Server that keeps hijacked connections (the hub parks them).
type pushEdge struct {
	srv  *proxy.Server
	hub  *push.Hub
	fs   *fasthttp.Server
	addr string
}

// servePushEdge starts an edge on a config file, in this process, until
// the test ends, and serves it on a fasthttp.Server of the test's own (the
// memory figures need its idle workers to go quickly) that keeps hijacked
// connections, as the edge's does. The hub is the edge's own.
func servePushEdge(t testing.TB, path string) *pushEdge {
	t.Helper()
	srv, _ := edgetest.New(t, path, edgetest.Discard)
	hub := srv.Events()
	if hub == nil {
		t.Fatal("the edge runs no event-stream hub (events.disabled?)")
	}
	fs := &fasthttp.Server{
		Handler: srv.Handle, Name: "flashgate", KeepHijackedConns: true,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second,
		ReadBufferSize: 8192, NoDefaultDate: true,
		// The burst of stream requests leaves idle workers behind for this
		// long (10s by default); the memory figure is taken after.
		MaxIdleWorkerDuration: time.Second,
	}
	ln := edgetest.Listen(t)
	go fs.Serve(ln)
	e := &pushEdge{srv: srv, hub: hub, fs: fs, addr: ln.Addr().String()}
	t.Cleanup(func() {
		fs.Shutdown()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return e
}

// pushConsumer runs the real order consumer into store, publishing each
// stored batch on Redis, and calls seen (if set) with the batch and the
// time it was stored, before publishing.
func pushConsumer(t testing.TB, brokers []string, redisAddr string, store orderstore.Store, seen func(map[string][]int64, time.Time)) {
	t.Helper()
	st := stocktest.Open(t, redisAddr, stocktest.Timeout(2*time.Second))
	d := conf.Defaults()
	c, err := consumer.New(consumer.Config{
		Brokers: brokers, Topic: d.Kafka.Topic, DLQTopic: d.Kafka.DLQTopic,
		Group: d.Orders.Group, BatchSize: d.Orders.BatchSize, BatchTime: d.Orders.BatchTime,
		Store: store, Stock: st,
		Log: edgetest.Discard,
		// What proxy/ and cmd/proxy/sub.go are to pass.
		OnStored: func(products map[string][]int64) {
			if seen != nil {
				seen(products, time.Now())
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := st.PublishStored(ctx, products); err != nil {
				t.Errorf("PublishStored: %v", err)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		<-done
	})
}

// pushStream is one shopper's event stream, read off the wire.
type pushStream struct {
	c      net.Conn
	r      *bufio.Reader
	status int
	body   string // a non-stream answer
}

// openPushStream sends GET /api/seckill/events with the shopper's JWT
// ("" for none) and reads the head (and the body of a non-stream answer).
func openPushStream(addr, query, jwt string) (*pushStream, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	req := "GET /api/seckill/events?" + query + " HTTP/1.1\r\nHost: edge\r\nAccept: text/event-stream\r\n"
	if jwt != "" {
		req += "Authorization: Bearer " + jwt + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	s := &pushStream{c: c, r: bufio.NewReaderSize(c, 1024)}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if s.status, _, s.body, err = edgetest.ReadHead(s.r); err != nil {
		c.Close()
		return nil, err
	}
	return s, nil
}

// next returns the next event's data, skipping comments; io.EOF at the end.
func (s *pushStream) next(within time.Duration) (string, error) {
	s.c.SetReadDeadline(time.Now().Add(within))
	return edgetest.NextEvent(s.r)
}

func (s *pushStream) close() { s.c.Close() }

// pushEdgeEnv makes the test binary an edge process (TestPushEdgeProcess).
const pushEdgeEnv = "FLASHGATE_E2E_PUSH_EDGE"

// pushEdgeStats is what an edge process reports on its control port.
type pushEdgeStats struct {
	Hub        push.Stats `json:"hub"`
	HeapStack  uint64     `json:"heapStack"` // HeapInuse+StackInuse after GC
	Goroutines int        `json:"goroutines"`
}

// TestPushEdgeProcess is not a test: the push load test runs the test
// binary again with pushEdgeEnv naming a config file, and this serves an
// edge on it (separate processes, as edges are, each with its own fd
// limit), prints "PUSHEDGE <addr> <control addr>", and runs until its
// stdin closes. The control port answers /stats.
func TestPushEdgeProcess(t *testing.T) {
	path := os.Getenv(pushEdgeEnv)
	if path == "" {
		t.Skip("helper process for the push load test")
	}
	if err := raiseNoFile(0); err != nil {
		t.Fatal(err)
	}
	e := servePushEdge(t, path)
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		json.NewEncoder(w).Encode(pushEdgeStats{Hub: e.hub.Stats(), HeapStack: m.HeapInuse + m.StackInuse, Goroutines: runtime.NumGoroutine()})
	})
	ln := edgetest.Listen(t)
	hs := &http.Server{Handler: mux}
	go hs.Serve(ln)
	defer hs.Close()
	fmt.Printf("PUSHEDGE %s %s\n", e.addr, ln.Addr())
	io.Copy(io.Discard, os.Stdin)
}

// pushEdgeProc is an edge process started by startPushEdgeProc.
type pushEdgeProc struct {
	addr, ctl string
}

func startPushEdgeProc(t *testing.T, configPath string) *pushEdgeProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPushEdgeProcess$", "-test.count=1", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), pushEdgeEnv+"="+configPath)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the edge shuts down and the process exits
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("edge process: %v\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("edge process did not exit within 30s of its stdin closing")
		}
	})
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if f := strings.Fields(lines.Text()); len(f) == 3 && f[0] == "PUSHEDGE" {
			go io.Copy(io.Discard, stdout)
			return &pushEdgeProc{addr: f[1], ctl: f[2]}
		}
	}
	t.Fatalf("edge process ended before it served:\n%s", stderr.String())
	return nil
}

func (p *pushEdgeProc) stats(t *testing.T) pushEdgeStats {
	t.Helper()
	res, err := http.Get("http://" + p.ctl + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var st pushEdgeStats
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// raiseNoFile lifts the soft open-file limit to the hard one and reports
// an error when that is below need (0: just lift it).
func raiseNoFile(need int) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return err
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return err
		}
	}
	if need > 0 && rl.Cur < uint64(need) {
		return fmt.Errorf("the open-file limit is %d (hard); this needs %d", rl.Cur, need)
	}
	return nil
}
