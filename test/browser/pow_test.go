package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/sale/room"
	"flashgate/static"
)

// powSecret signs the challenges of the proof-of-work tests.
var powSecret = []byte("browser-pow-secret-0123456789abcdef0123")

// powSolution is what the page got from the worker for one challenge.
type powSolution struct {
	Nonce string  `json:"nonce"`
	Tries float64 `json:"tries"`
	Ms    float64 `json:"ms"`   // the worker's own time, from the message to the answer
	Wall  float64 `json:"wall"` // the page's: new Worker() to the answer
	Error string  `json:"error"`
}

// startPageServer serves the sale page and its assets, as the edge does,
// from the embedded files on a loopback fasthttp server: the worker runs
// under the page's real Content-Security-Policy. Nothing else answers (the
// page's own API calls get 404), which the proof of work does not need.
func startPageServer(t *testing.T) string {
	t.Helper()
	h, err := static.New(conf.Defaults().Static)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	asset := []byte(static.AssetPath)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		p := ctx.Path()
		switch {
		case bytes.HasPrefix(p, asset):
			h.ServeAsset(ctx, p[len(asset):])
		case bytes.HasPrefix(p, []byte("/seckill/")):
			h.ServePage(ctx)
		default:
			ctx.SetStatusCode(fasthttp.StatusNotFound)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// solveInPage has the page solve the challenges one after the other and
// returns the answers: each in a fresh worker, as a shopper's page does on
// Join, or all in one (a worker answers any number of messages).
func solveInPage(b *tab, engine string, challenges []string, difficulty int, fresh bool, d time.Duration) []powSolution {
	b.t.Helper()
	in, _ := json.Marshal(challenges)
	expr := `(async function () {
  var out = [], w = null, fresh = ` + strconv.FormatBool(fresh) + `;
  for (var c of ` + string(in) + `) {
    var t0 = performance.now();
    if (!w) w = new Worker('` + static.AssetPath + `pow.js');
    var r = await new Promise(function (resolve) {
      w.onmessage = function (e) { resolve(e.data); };
      w.onerror = function (e) { resolve({ error: 'worker: ' + (e.message || 'failed to load') }); };
      w.postMessage({ challenge: c, difficulty: ` + strconv.Itoa(difficulty) + `, engine: ` + jsString(engine) + ` });
    });
    if (fresh) { w.terminate(); w = null; }
    r.wall = performance.now() - t0;
    out.push(r);
  }
  if (w) w.terminate();
  return out;
})()`
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[[]powSolution](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("%s: solving %d challenges at difficulty %d (%s): %v", b.name, len(challenges), difficulty, engine, err)
	}
	return v
}

// verifyAll checks every answer with the edge's own verifier.
func verifyAll(t *testing.T, c *room.Challenger, challenges, users []string, product string, got []powSolution) {
	t.Helper()
	if len(got) != len(challenges) {
		t.Fatalf("%d answers for %d challenges", len(got), len(challenges))
	}
	now := time.Now().UnixMilli()
	for i, s := range got {
		if s.Error != "" {
			t.Fatalf("challenge %d (%d chars): the worker said %q", i, len(challenges[i]), s.Error)
		}
		if err := c.Verify([]byte(challenges[i]), []byte(s.Nonce), []byte(users[i]), []byte(product), now); err != nil {
			t.Fatalf("challenge %d (%d chars) %q: the edge refused the browser's nonce %q: %v", i, len(challenges[i]), challenges[i], s.Nonce, err)
		}
	}
}

// TestPowWorkerAnswersEveryLength: the worker's SHA-256 agrees with the
// edge's for every length a challenge can have (the prefix before the nonce
// spans 0 to 3 whole blocks, and the nonce ends in the first or the second
// of the last blocks), with both engines.
func TestPowWorkerAnswersEveryLength(t *testing.T) {
	t.Parallel()
	base := startPageServer(t)
	c := room.NewChallenger(powSecret)
	var challenges, users []string
	lengths := map[int]bool{}
	for _, product := range []string{"p", strings.Repeat("q", 64)} {
		for n := 1; n <= 64; n++ {
			user := strings.Repeat("u", n)
			ch := c.Issue([]byte(user), []byte(product), 8, time.Now().UnixMilli())
			challenges, users = append(challenges, ch), append(users, user)
			lengths[len(ch)] = true
		}
	}
	// Every raw length from the shortest (1-byte user and product) to the
	// longest (64 and 64) is there, so every length a challenge can have.
	if len(lengths) != 127 || !lengths[room.MinChallengeLen] || !lengths[room.MaxChallengeLen] {
		t.Fatalf("%d distinct challenge lengths, want every one of %d..%d", len(lengths), room.MinChallengeLen, room.MaxChallengeLen)
	}
	b := newTab(t, "pow")
	b.open(base + "/seckill/p1")
	for _, engine := range []string{"js", "subtle"} {
		// Products differ per half: verify each half with its own product.
		got := solveInPage(b, engine, challenges, 8, false, 60*time.Second)
		verifyAll(t, c, challenges[:64], users[:64], "p", got[:64])
		verifyAll(t, c, challenges[64:], users[64:], strings.Repeat("q", 64), got[64:])
	}
}

// TestPowMeasure measures the proof of work in headless Chromium on this
// machine: for each difficulty, the time a fresh worker takes to find the
// nonce (median and maximum over a few runs), the hash rate and the CPU the
// browser's processes used meanwhile, logged as a table. It asserts only
// that the edge accepts every nonce the browser found. It is not parallel,
// so it runs while the other browser tests wait: the CPU is the worker's.
func TestPowMeasure(t *testing.T) {
	base := startPageServer(t)
	c := room.NewChallenger(powSecret)
	b := newTab(t, "pow-measure")
	b.open(base + "/seckill/p1")
	type plan struct {
		engine     string
		difficulty int
		runs       int
	}
	plans := []plan{
		{"js", 8, 5}, {"js", 12, 5}, {"js", 16, 5}, {"js", 18, 5}, {"js", 20, 3},
		// WebCrypto, only to compare: at its rate 18 and 20 would take most
		// of the budget.
		{"subtle", 8, 3}, {"subtle", 12, 3}, {"subtle", 16, 2},
	}
	var rows []string
	for _, p := range plans {
		var challenges, users []string
		for i := range p.runs {
			user := fmt.Sprintf("pow-user-%d", i)
			challenges = append(challenges, c.Issue([]byte(user), []byte("p1"), p.difficulty, time.Now().UnixMilli()))
			users = append(users, user)
		}
		cpu0 := browserCPU(t)
		t0 := time.Now()
		got := solveInPage(b, p.engine, challenges, p.difficulty, true, 90*time.Second)
		elapsed := time.Since(t0)
		cpu := browserCPU(t) - cpu0
		verifyAll(t, c, challenges, users, "p1", got)
		var solve, wall []float64
		var tries, ms float64
		for _, s := range got {
			solve, wall = append(solve, s.Ms), append(wall, s.Wall)
			tries += s.Tries
			ms += s.Ms
		}
		rate := tries / ms * 1000
		expected := float64(uint64(1) << p.difficulty)
		rows = append(rows, fmt.Sprintf("| %-6s | %2d | %d | %9.0f | %8.0f | %8.1f / %8.1f | %8.1f / %8.1f | %9.0f | %8.1f | %4.2f |",
			p.engine, p.difficulty, p.runs, tries/float64(p.runs), expected,
			median(solve), slices.Max(solve), median(wall), slices.Max(wall),
			rate, expected/rate*1000, cpu.Seconds()/elapsed.Seconds()))
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("proof of work in headless Chromium, %d CPUs, load %s (fresh worker per run; solve = the worker's time, "+
		"wall = the page's, new Worker() to answer; mean ms = 2^bits at the measured rate; cores = browser CPU / wall time)\n"+
		"| engine | bits | runs | tries (mean) | 2^bits | solve ms median / max | wall ms median / max | hashes/s | mean ms | cores |\n"+
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n%s", runtime.NumCPU(), bytes.TrimSpace(load), strings.Join(rows, "\n"))
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// browserCPU is the CPU time (user + system) of the test's Chromium and all
// its child processes so far, from /proc (clock ticks of 10 ms, USER_HZ 100
// on Linux). Processes that ended in between are not counted, which is why
// it is read around one batch at a time with the same tab open.
func browserCPU(t *testing.T) time.Duration {
	t.Helper()
	root := chromedp.FromContext(browserCtx).Browser.Process().Pid
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	ticks := map[int]int64{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid ... utime stime: comm may hold spaces and
		// parentheses, so the fields are counted after the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		parent[pid], ticks[pid] = ppid, utime+stime
	}
	var total int64
	for pid, tk := range ticks {
		for p := pid; p > 1; p = parent[p] {
			if p == root {
				total += tk
				break
			}
		}
	}
	return time.Duration(total) * 10 * time.Millisecond
}
