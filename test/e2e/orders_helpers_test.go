package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"flashgate/conf"
	"flashgate/internal/chtest"
	"flashgate/internal/kafkatest"
	"flashgate/internal/redistest"
	"flashgate/orders/order"
	"flashgate/orders/stock"
)

// The orders tests (orders_*_test.go) run the whole pipeline: edges in
// front of a real redis-server, a kfake Kafka broker passed as
// kafka.brokers, and a real ClickHouse (18.16 from Debian) as the order
// store. They read every component directly (Redis keys, ClickHouse rows
// with FINAL, Kafka through kafka-go) instead of trusting the edge.

const ordDatabase = "flashgate"

// ordEnv is one test's set of servers and the test's own clients to them.
type ordEnv struct {
	t       *testing.T
	redis   *redistest.Server
	rd      *rdb
	brokers []string
	kafka   *kfake.Cluster
	ch      *chtest.Server
	chc     driver.Conn
	j       *jwts
	dataDir string
}

func newOrdEnv(t *testing.T) *ordEnv {
	t.Helper()
	r := redistest.New(t)
	return newOrdEnvOn(t, r, r.Addr())
}

// newOrdEnvOn is newOrdEnv on a Redis the test started itself: redis is
// nil when it is not one standalone server (a Cluster), and redisAddr is
// what the test's own client connects to (a cluster seed will do).
func newOrdEnvOn(t *testing.T, redis *redistest.Server, redisAddr string) *ordEnv {
	t.Helper()
	env := &ordEnv{t: t, redis: redis, ch: chtest.New(t), j: newJWTs(t, sessionSecret), dataDir: t.TempDir()}
	env.rd = openRedis(t, redisAddr)
	env.brokers, env.kafka = kafkatest.Start(t)
	conn, err := clickhouse.Open(&clickhouse.Options{
		Protocol:    clickhouse.Native,
		Addr:        []string{env.ch.Addr()},
		Auth:        clickhouse.Auth{Database: "default", Username: "default"},
		DialTimeout: 2 * time.Second,
		ReadTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatalf("clickhouse %s: %v", env.ch.Addr(), err)
	}
	t.Cleanup(func() { conn.Close() })
	env.chc = conn
	return env
}

// pipeline is the YAML override that points an edge at the test's Kafka
// and ClickHouse; extra YAML documents go after it. redis.timeout is 2s
// rather than 200ms: these tests assert that every purchase is answered
// 200/409/410, and on a 2-core machine shared with other test runs a
// scheduling stall of 200ms (a 503 and then the open breaker) is not what
// they are about.
func (env *ordEnv) pipeline(consumer bool, extra ...string) []string {
	quoted := make([]string, len(env.brokers))
	for i, b := range env.brokers {
		quoted[i] = strconv.Quote(b)
	}
	base := fmt.Sprintf(`data_dir: %q
redis: {timeout: 2s}
kafka: {brokers: [%s], partitions: 6, batch_timeout: 2ms, timeout: 3s}
orders: {consumer: %v, relay_interval: 200ms, relay_min_age: 5s, batch_size: 500, batch_time: 20ms}
clickhouse: {addr: %q, database: %s}
`, env.dataDir, strings.Join(quoted, ", "), consumer, env.ch.Addr(), ordDatabase)
	return append([]string{base}, extra...)
}

// startEdge starts an in-process edge on the test's servers.
func (env *ordEnv) startEdge(consumer bool, extra ...string) *edge {
	env.t.Helper()
	return startEdge(env.t, env.redis.Addr(), env.pipeline(consumer, extra...)...)
}

func (env *ordEnv) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 20*time.Second)
}

// rowCount is SELECT count() FROM seckill_order FINAL (an error while the
// table does not exist yet or ClickHouse is down).
func (env *ordEnv) rowCount(where string, args ...any) (int64, error) {
	ctx, cancel := env.ctx()
	defer cancel()
	var n int64
	q := "SELECT toInt64(count()) FROM " + ordDatabase + ".seckill_order FINAL"
	if where != "" {
		q += " WHERE " + where
	}
	err := env.chc.QueryRow(ctx, q, args...).Scan(&n)
	return n, err
}

// rawRowCount counts without FINAL: every row inserted and not yet merged.
func (env *ordEnv) rawRowCount(where string, args ...any) int64 {
	env.t.Helper()
	ctx, cancel := env.ctx()
	defer cancel()
	var n int64
	q := "SELECT toInt64(count()) FROM " + ordDatabase + ".seckill_order"
	if where != "" {
		q += " WHERE " + where
	}
	if err := env.chc.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		env.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// ordRow is one stored order after FINAL.
type ordRow struct {
	product, user string
	qty           uint32
	status        uint8
	updateMs      uint64
}

// rows reads every stored order after FINAL, by order id.
func (env *ordEnv) rows() map[int64]ordRow {
	env.t.Helper()
	ctx, cancel := env.ctx()
	defer cancel()
	rs, err := env.chc.Query(ctx, "SELECT order_id, product_id, user_id, quantity, status, update_ms FROM "+ordDatabase+".seckill_order FINAL")
	if err != nil {
		env.t.Fatalf("select rows: %v", err)
	}
	defer rs.Close()
	out := map[int64]ordRow{}
	for rs.Next() {
		var id uint64
		var r ordRow
		if err := rs.Scan(&id, &r.product, &r.user, &r.qty, &r.status, &r.updateMs); err != nil {
			env.t.Fatalf("scan row: %v", err)
		}
		out[int64(id)] = r
	}
	if err := rs.Err(); err != nil {
		env.t.Fatalf("rows: %v", err)
	}
	return out
}

// awaitRows waits until count() FINAL is want; it fails the test with the
// last count (or error) when the deadline passes first.
func (env *ordEnv) awaitRows(want int64, d time.Duration) time.Duration {
	env.t.Helper()
	took, err := env.waitRows(want, d)
	if err != nil {
		env.t.Fatal(err)
	}
	return took
}

// waitRows is awaitRows that leaves the verdict to the caller, for a test
// that goes on to say which orders are missing.
func (env *ordEnv) waitRows(want int64, d time.Duration) (time.Duration, error) {
	start := time.Now()
	var n int64
	var err error
	if !waitFor(d, func() bool {
		n, err = env.rowCount("")
		return err == nil && n == want
	}) {
		return d, fmt.Errorf("ClickHouse holds %d rows (err %v) after %v, want %d", n, err, d, want)
	}
	return time.Since(start), nil
}

// orderStates reads state and created of every order (pipelined, per product).
func (env *ordEnv) orderStates(ids []ordID) (states []string, createdMs []int64) {
	env.t.Helper()
	c := env.rd.c
	states = make([]string, len(ids))
	createdMs = make([]int64, len(ids))
	for lo := 0; lo < len(ids); lo += 1000 {
		hi := min(lo+1000, len(ids))
		byProduct := map[string][]int64{}
		for _, id := range ids[lo:hi] {
			byProduct[id.product] = append(byProduct[id.product], id.id)
		}
		found := map[ordID]stock.OrderInfo{}
		for p, pids := range byProduct {
			ctx, cancel := env.ctx()
			m, err := stock.ReadOrders(ctx, c, p, pids)
			cancel()
			if err != nil {
				env.t.Fatalf("read orders of %s: %v", p, err)
			}
			for id, o := range m {
				found[ordID{product: p, id: id}] = o
			}
		}
		for i, id := range ids[lo:hi] {
			states[lo+i], createdMs[lo+i] = found[id].State, found[id].CreatedMs
		}
	}
	return states, createdMs
}

// awaitStates waits until every order's Redis state is want.
func (env *ordEnv) awaitStates(ids []ordID, want string, d time.Duration) {
	env.t.Helper()
	var bad int
	var example string
	if !waitFor(d, func() bool {
		states, _ := env.orderStates(ids)
		bad, example = 0, ""
		for i, s := range states {
			if s != want {
				bad++
				if example == "" {
					example = fmt.Sprintf("order %v is %q", ids[i], s)
				}
			}
		}
		return bad == 0
	}) {
		env.t.Fatalf("after %v, %d of %d orders are not %q in Redis (e.g. %s)", d, bad, len(ids), want, example)
	}
}

// outboxTotal is the sum of XLEN sk:{p}:outbox over products.
func (env *ordEnv) outboxTotal(products []string) int64 {
	env.t.Helper()
	var n int64
	for _, p := range products {
		n += env.rd.xlen(p)
	}
	return n
}

// saleMeta reads sk:{p}:meta.
func (env *ordEnv) saleMeta(p string) map[string]string {
	env.t.Helper()
	ctx, cancel := env.ctx()
	defer cancel()
	m, err := env.rd.c.Do(ctx, env.rd.c.B().Hgetall().Key(stock.MetaKey(p)).Build()).AsStrMap()
	if err != nil {
		env.t.Fatalf("HGETALL meta %s: %v", p, err)
	}
	return m
}

// ordID is one order as the shopper learnt it.
type ordID struct {
	product string
	id      int64
}

func (o ordID) String() string { return o.product + "/" + strconv.FormatInt(o.id, 10) }

// ordPlan is one purchase attempt: token then do, quantity 1.
type ordPlan struct{ user, product string }

// ordAnswer is what the shopper got.
type ordAnswer struct {
	status int
	code   string
	msg    string // message of an error answer other than 410/409
	order  int64  // orderId of a 200 (or of a 503 that names its order)
	err    error  // transport error
	took   time.Duration
	at     time.Duration // since the load started, when the answer came
}

// ordLoad runs plans against an edge with a pool of concurrent buyers.
type ordLoad struct {
	target  func() *edge // the edge to send the next attempt to
	j       *jwts
	workers int
	// every, if set, paces the attempts: attempt n starts no earlier than
	// start + n*every (a rate limit, not a synchronisation).
	every time.Duration
	// onErr runs on the buyer's goroutine after a transport error (e.g. to
	// wait until a killed edge is back).
	onErr func()

	ok, done atomic.Int64 // 200 answers and answers so far, for tests that watch the load
	start    time.Time
}

// run makes every attempt once and returns the answers in plan order.
func (l *ordLoad) run(plans []ordPlan) []ordAnswer {
	out := make([]ordAnswer, len(plans))
	var next atomic.Int64
	var wg sync.WaitGroup
	l.start = time.Now()
	for range l.workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(plans) {
					return
				}
				if l.every > 0 {
					if d := time.Until(l.start.Add(time.Duration(i) * l.every)); d > 0 {
						time.Sleep(d)
					}
				}
				p := plans[i]
				t0 := time.Now()
				r, err := l.target().attempt(l.j.get(p.user), p.product, 1)
				a := ordAnswer{status: r.status, code: r.code(), err: err, took: time.Since(t0), at: time.Since(l.start)}
				if err == nil {
					a.order, _ = strconv.ParseInt(jsonStr(r.body, "orderId"), 10, 64)
					if r.status != 200 && r.status != 409 && r.status != 410 {
						a.msg = jsonStr(r.body, "message")
					}
				}
				out[i] = a
				if err == nil && r.status == 200 {
					l.ok.Add(1)
				}
				l.done.Add(1)
				if err != nil && l.onErr != nil {
					l.onErr()
				}
			}
		})
	}
	wg.Wait()
	return out
}

// ordPlans makes n attempts by distinct users over the products in turn:
// with limit 1, every attempt while stock remains succeeds.
func ordPlans(prefix string, n int, products []string) []ordPlan {
	out := make([]ordPlan, n)
	for i := range out {
		out[i] = ordPlan{user: prefix + strconv.Itoa(i), product: products[i%len(products)]}
	}
	return out
}

// ordSales renders activities of stock units each (limit 1).
func ordSales(products []string, units int) string {
	var items []string
	for _, p := range products {
		items = append(items, sale(p, units, 1))
	}
	return activities(items...)
}

func ordProducts(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "p" + strconv.Itoa(i)
	}
	return out
}

// summarize counts answers by "status code" and returns the orders of the
// 200s.
func summarize(plans []ordPlan, answers []ordAnswer) (counts map[string]int, ok []ordID) {
	counts = map[string]int{}
	for i, a := range answers {
		switch {
		case a.err != nil:
			counts["transport error"]++
		case a.status == 200:
			counts["200"]++
			ok = append(ok, ordID{plans[i].product, a.order})
		case a.msg != "":
			counts[strconv.Itoa(a.status)+" "+a.code+" ("+a.msg+")"]++
		default:
			counts[strconv.Itoa(a.status)+" "+a.code]++
		}
	}
	return counts, ok
}

// percentile of durations (p in [0,1]).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// reconcileAdmin asks an edge's admin listener for the reconcile report
// and returns its status and text.
func reconcileAdmin(t *testing.T, admin string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 90 * time.Second}
	res, err := c.Get("http://" + admin + "/admin/reconcile")
	if err != nil {
		t.Fatalf("GET /admin/reconcile: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// checkReconcile asserts the admin reconcile report is clean for n products.
func checkReconcile(t *testing.T, admin string, n int) {
	t.Helper()
	code, text := reconcileAdmin(t, admin)
	want := fmt.Sprintf("RECONCILE products=%d oversold=0 lost=0 duplicated=0", n)
	if code != 200 || lastLine(text) != want {
		t.Errorf("reconcile answered %d:\n%s\nwant 200 and last line %q", code, text, want)
	}
}

// adminPost posts JSON to an admin listener.
func adminPost(t *testing.T, admin, path, body string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	res, err := c.Post("http://"+admin+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// adminMetric reads one sample from an admin listener's /metrics (-1 when
// absent).
func adminMetric(t *testing.T, admin, name string) float64 {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	res, err := c.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// ordFreePort is a loopback port free right now (the real binary needs
// fixed ports so that a restart comes back on the same address).
func ordFreePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// edgeProc is the real proxy binary as another process, which a test may
// kill -9.
type edgeProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	exited chan error
	killed bool
	mu     sync.Mutex
	tail   []string
}

// startEdgeProc runs `bin args...` and waits for the edge's "started" log
// line (JSON logs; `proxy orders`: the consumer's); it is stopped with SIGTERM (exit 0 expected) when the
// test ends unless it was killed.
func startEdgeProc(t *testing.T, bin string, args ...string) *edgeProc {
	t.Helper()
	p := &edgeProc{t: t, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, args...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			var rec struct {
				Msg string `json:"msg"`
			}
			parsed := json.Unmarshal([]byte(line), &rec) == nil
			if parsed && (rec.Msg == "flashgate edge started" || rec.Msg == "order consumer started") {
				once.Do(func() { close(started) })
			}
			// Every 5xx is access-logged: under load they would push
			// the lines that explain them out of the tail.
			if parsed && rec.Msg == "access" {
				continue
			}
			p.mu.Lock()
			p.tail = append(p.tail, line)
			if len(p.tail) > 200 {
				p.tail = p.tail[1:]
			}
			p.mu.Unlock()
		}
		io.Copy(io.Discard, stderr)
		p.exited <- p.cmd.Wait()
	}()
	select {
	case <-started:
	case err := <-p.exited:
		t.Fatalf("proxy exited before it started: %v\n%s", err, p.logTail())
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("proxy did not start within 20s\n%s", p.logTail())
	}
	t.Cleanup(func() {
		if p.killed {
			return
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.exited:
			if err != nil {
				t.Errorf("proxy exited with %v after SIGTERM\n%s", err, p.logTail())
			}
		case <-time.After(20 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
			t.Errorf("proxy did not stop within 20s of SIGTERM\n%s", p.logTail())
		}
	})
	return p
}

func (p *edgeProc) logTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// kill9 kills the process with SIGKILL and reaps it.
func (p *edgeProc) kill9() {
	p.t.Helper()
	p.killed = true
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatalf("kill -9: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.t.Fatal("killed proxy did not exit within 10s")
	}
}

// term sends SIGTERM (a graceful stop: the edge drains) and returns at
// once; awaitExit waits for the exit. The test's clean-up then has nothing
// left to stop.
func (p *edgeProc) term() {
	p.t.Helper()
	p.killed = true
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatalf("SIGTERM: %v", err)
	}
}

// awaitExit waits up to within for the process to exit, and fails unless
// it exited 0.
func (p *edgeProc) awaitExit(within time.Duration) {
	p.t.Helper()
	select {
	case err := <-p.exited:
		if err != nil {
			p.t.Errorf("proxy exited with %v after SIGTERM\n%s", err, p.logTail())
		}
	case <-time.After(within):
		p.cmd.Process.Kill()
		<-p.exited
		p.t.Fatalf("proxy did not stop within %v of SIGTERM\n%s", within, p.logTail())
	}
}

// runProxy runs `bin args...` to completion (a subcommand) and returns its
// exit code, stdout and stderr.
func runProxy(t *testing.T, timeout time.Duration, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return code, stdout.String(), stderr.String()
}

// topicEvents reads the whole orders topic and groups the product's
// events by order id.
func (env *ordEnv) topicEvents(product string) map[int64][]order.Event {
	env.t.Helper()
	ctx, cancel := env.ctx()
	defer cancel()
	topic := conf.Defaults().Kafka.Topic
	c, err := kafka.DialContext(ctx, "tcp", env.brokers[0])
	if err != nil {
		env.t.Fatal(err)
	}
	parts, err := c.ReadPartitions(topic)
	c.Close()
	if err != nil {
		env.t.Fatal(err)
	}
	out := map[int64][]order.Event{}
	for _, p := range parts {
		conn, err := kafka.DialLeader(ctx, "tcp", env.brokers[0], topic, p.ID)
		if err != nil {
			env.t.Fatal(err)
		}
		first, last, err := conn.ReadOffsets()
		if err != nil {
			conn.Close()
			env.t.Fatal(err)
		}
		if _, err := conn.Seek(first, kafka.SeekAbsolute); err != nil {
			conn.Close()
			env.t.Fatal(err)
		}
		for off := first; off < last; {
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			b := conn.ReadBatch(1, 16<<20)
			for {
				m, err := b.ReadMessage()
				if err != nil {
					break
				}
				off = m.Offset + 1
				ev, err := order.Decode(m.Value)
				if err != nil {
					env.t.Errorf("partition %d offset %d: %v", p.ID, m.Offset, err)
					continue
				}
				if ev.ProductID == product {
					out[ev.ID] = append(out[ev.ID], ev)
				}
			}
			if err := b.Close(); err != nil && off < last {
				conn.Close()
				env.t.Fatalf("partition %d at %d of %d: %v", p.ID, off, last, err)
			}
		}
		conn.Close()
	}
	return out
}

// explainMissing logs, for every order Redis holds but ClickHouse does
// not, its Redis record and every event of it the orders topic holds: the
// two places an order can have gone missing between.
func (env *ordEnv) explainMissing(products []string) {
	env.t.Helper()
	rows := env.rows()
	for _, p := range products {
		ids, _ := env.rd.orders(p)
		var missing []int64
		for _, s := range ids {
			id, _ := strconv.ParseInt(s, 10, 64)
			if _, ok := rows[id]; !ok {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			continue
		}
		ctx, cancel := env.ctx()
		recs, err := stock.ReadOrders(ctx, env.rd.c, p, missing)
		cancel()
		events := env.topicEvents(p)
		for _, id := range missing {
			env.t.Logf("missing from ClickHouse: %s/%d redis %+v (err %v); in the topic %d times: %+v",
				p, id, recs[id], err, len(events[id]), events[id])
		}
	}
}
