package e2e

import (
	"bufio"
	"encoding/json"
	"flashgate/internal/kafkatest"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"flashgate/internal/redistest"
)

// shopAPI is what the sold-out test needs of an edge, in this process or
// in another one.
type shopAPI interface {
	do(method, path, auth string, body []byte) (resp, error)
}

// TestSoldOutCostsNoRedis: once a product is sold out, neither the edge
// that sold it nor another edge sharing the Redis spends a script call on
// it, and the other edge learns it within a second without asking Redis.
func TestSoldOutCostsNoRedis(t *testing.T) {
	t.Run("in_process", func(t *testing.T) {
		testSoldOutCostsNoRedis(t, func(t *testing.T, redisAddr string, overrides ...string) (shopAPI, func() float64) {
			b := startEdge(t, redisAddr, overrides...)
			return b, func() float64 { return b.metric(`flashgate_redis_script_calls_total{what="calls"}`) }
		})
	})
	t.Run("binary", func(t *testing.T) {
		bin := buildProxy(t)
		testSoldOutCostsNoRedis(t, func(t *testing.T, redisAddr string, overrides ...string) (shopAPI, func() float64) {
			return startProcess(t, bin, redisAddr, overrides...), nil
		})
	})
}

func testSoldOutCostsNoRedis(t *testing.T, startB func(*testing.T, string, ...string) (shopAPI, func() float64)) {
	const units, late = 20, 2000
	r := redistest.New(t)
	rd := openRedis(t, r.Addr())
	acts := activities(sale("hot", units, 1))
	a := startEdge(t, r.Addr(), acts)
	// B refreshes once a minute: only the sold-out broadcast can tell it
	// within the second this test allows.
	b, bScriptCalls := startB(t, r.Addr(), acts, "sale: {refresh_interval: 1m}")
	j := newJWTs(t, sessionSecret)

	if st := statusOf(t, b, "hot"); st != "active" {
		t.Fatalf("edge B status before the sale = %q, want active", st)
	}
	// Tokens minted before the sell-out (no Redis involved), for `do`
	// calls after it.
	tokA, tokB := mintTokens(t, a, j, "a-late-", late), mintTokens(t, b, j, "b-late-", late)

	for i := range units {
		res, err := a.attempt(j.get("buyer-"+strconv.Itoa(i)), "hot", 1)
		if err != nil || res.status != 200 {
			t.Fatalf("purchase %d: %v %v", i, res, err)
		}
	}
	soldAt := time.Now()
	if res, _ := a.attempt(j.get("one-too-many"), "hot", 1); res.status != 410 || res.code() != "SOLD_OUT" {
		t.Fatalf("attempt after the sell-out on A: %v, want 410 SOLD_OUT", res)
	}

	// B has seen no deduction; it must learn the sell-out within 1 s.
	if !waitFor(time.Second-time.Since(soldAt), func() bool { return statusOf(t, b, "hot") == "soldout" }) {
		t.Fatalf("edge B still says %q %v after the sell-out on edge A", statusOf(t, b, "hot"), time.Since(soldAt))
	}
	t.Logf("edge B reported soldout %v after edge A's last sale", time.Since(soldAt).Round(time.Microsecond))

	for _, c := range []struct {
		name string
		e    shopAPI
		toks []string
		pre  string
	}{{"A", a, tokA, "a-late-"}, {"B", b, tokB, "b-late-"}} {
		scripts0, cmds0 := rd.scriptCalls(), rd.totalCommands()
		start := time.Now()
		answers := hammer(c.e, j, c.pre, c.toks)
		elapsed := time.Since(start)
		scripts1, cmds1 := rd.scriptCalls(), rd.totalCommands()
		if len(answers) != 1 || answers["410 SOLD_OUT"] != 2*late {
			t.Errorf("edge %s: answers after the sell-out %v, want %d × 410 SOLD_OUT", c.name, answers, 2*late)
		}
		if scripts1 != scripts0 {
			t.Errorf("edge %s: %d script calls (EVALSHA+EVAL) for %d attempts on a sold-out product, want 0", c.name, scripts1-scripts0, late)
		}
		// What remains is the background refresh (a few commands a
		// second per edge) and this test's own INFO calls.
		if d := cmds1 - cmds0; d > 100 {
			t.Errorf("edge %s: Redis processed %d commands during %d sold-out attempts (%d requests) in %v, want only background refresh",
				c.name, d, late, 2*late, elapsed)
		} else {
			t.Logf("edge %s: %d attempts (%d requests) in %v cost Redis %d commands (refresh + INFO), 0 scripts",
				c.name, late, 2*late, elapsed.Round(time.Millisecond), d)
		}
	}
	if bScriptCalls != nil {
		if n := bScriptCalls(); n != 0 {
			t.Errorf("edge B made %v deduction script calls; it never had a purchase to make", n)
		}
	}
	if s := rd.stock("hot"); s != 0 {
		t.Errorf("stock = %d, want 0", s)
	}
	if n := rd.orderCount("hot"); n != units {
		t.Errorf("outbox = %d, want %d", n, units)
	}
}

func statusOf(t *testing.T, e shopAPI, product string) string {
	t.Helper()
	r, err := e.do("GET", "/api/seckill/status?productId="+product, "", nil)
	if err != nil || r.status != 200 {
		t.Fatalf("status %s: %v %v", product, r, err)
	}
	return jsonStr(r.body, "status")
}

func mintTokens(t *testing.T, e shopAPI, j *jwts, prefix string, n int) []string {
	t.Helper()
	toks := make([]string, n)
	for i := range toks {
		r, err := e.do("POST", "/api/seckill/token", j.get(prefix+strconv.Itoa(i)), []byte(`{"productId":"hot"}`))
		if err != nil || r.status != 200 {
			t.Fatalf("token: %v %v", r, err)
		}
		toks[i] = jsonStr(r.body, "token")
	}
	return toks
}

// hammer sends, for each token, a token call and a do call with that
// token, from 50 concurrent shoppers, and counts the answers.
func hammer(e shopAPI, j *jwts, prefix string, toks []string) map[string]int {
	var mu sync.Mutex
	out := map[string]int{}
	count := func(r resp, err error) {
		k := strconv.Itoa(r.status) + " " + r.code()
		if err != nil {
			k = "error " + err.Error()
		}
		mu.Lock()
		out[k]++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	work := make(chan int)
	for range 50 {
		wg.Go(func() {
			for i := range work {
				jwt := j.get(prefix + strconv.Itoa(i))
				count(e.do("POST", "/api/seckill/token", jwt, []byte(`{"productId":"hot"}`)))
				count(e.do("POST", "/api/seckill/do", jwt, []byte(`{"productId":"hot","token":"`+toks[i]+`","quantity":1}`)))
			}
		})
	}
	for i := range toks {
		work <- i
	}
	close(work)
	wg.Wait()
	return out
}

// buildProxy builds cmd/proxy once per test binary run (TestMain removes
// it).
var buildOnce struct {
	sync.Once
	bin string
	err error
	out []byte
}

func buildProxy(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "flashgate-e2e-")
		if err != nil {
			buildOnce.err = err
			return
		}
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			goBin = "go"
		}
		buildOnce.bin = filepath.Join(dir, "proxy")
		cmd := exec.Command(goBin, "build", "-o", buildOnce.bin, "flashgate/cmd/proxy")
		buildOnce.out, buildOnce.err = cmd.CombinedOutput()
	})
	if buildOnce.err != nil {
		t.Fatalf("go build ./cmd/proxy: %v\n%s", buildOnce.err, buildOnce.out)
	}
	return buildOnce.bin
}

func TestMain(m *testing.M) {
	kafkatest.ServeChild() // the broker process of kafkatest.StartProcess
	code := m.Run()
	if buildOnce.bin != "" {
		os.RemoveAll(filepath.Dir(buildOnce.bin))
	}
	os.Exit(code)
}

// process is the real binary running as another process.
type process struct {
	addr string
	hc   *edge // only its HTTP client is used
}

func (p *process) do(method, path, auth string, body []byte) (resp, error) {
	return p.hc.do(method, path, auth, body)
}

// startProcess runs `proxy -c FILE` with the base config merged with
// overrides, and waits for its "started" log line (which names the
// listener it bound on port 0). SIGTERM at cleanup; it must exit 0.
func startProcess(t *testing.T, bin, redisAddr string, overrides ...string) *process {
	t.Helper()
	ov := append([]string{"node_id: 999\nredis: {addr: \"" + redisAddr + "\"}\nlog: {level: info, format: json}\n"}, overrides...)
	path := writeConfig(t, ov...)
	cmd := exec.Command(bin, "-c", path)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	listen := make(chan string, 1)
	var logMu sync.Mutex
	var logTail []string
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			logTail = append(logTail, line)
			if len(logTail) > 50 {
				logTail = logTail[1:]
			}
			logMu.Unlock()
			var rec struct {
				Msg    string `json:"msg"`
				Listen string `json:"listen"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "flashgate edge started" {
				listen <- rec.Listen
			}
		}
		io.Copy(io.Discard, stderr)
		exited <- cmd.Wait()
	}()
	tail := func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return strings.Join(logTail, "\n")
	}
	p := &process{}
	select {
	case p.addr = <-listen:
	case err := <-exited:
		t.Fatalf("proxy exited before it started: %v\n%s", err, tail())
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("proxy did not start within 15s\n%s", tail())
	}
	p.hc = &edge{t: t, addr: p.addr, api: newAPIClient()}
	t.Cleanup(func() {
		p.hc.api.CloseIdleConnections()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("proxy exited with %v after SIGTERM\n%s", err, tail())
			}
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("proxy did not stop within 15s of SIGTERM\n%s", tail())
		}
	})
	return p
}
