package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Generator drives a scenario's shoppers against one edge, or several: a
// shopper keeps to one edge for her whole journey (user i to edge i mod n).
//
// Open mode: shoppers arrive on the Pacer's schedule, whatever the edge
// does (open loop). Each step after the first is intended at the previous
// answer plus its think time (a shopper reacts to what she sees), and every
// request's latency is measured from its intended time, so time spent
// waiting for a free connection or a late timer counts (no coordinated
// omission). Closed mode: `connections` shoppers loop, each sending its
// next request when the previous one is answered; latency from the send.
type Generator struct {
	sc      *Scenario
	addrs   []string
	clients []*fasthttp.HostClient
	users   *Users
	rec     *Recorder
	// observe, if set, is told every purchase answer (status 0: none),
	// for the failover timeline.
	observe func(product int, status int, code string)

	jobs     chan job
	wg       sync.WaitGroup
	active   atomic.Int64 // journeys in progress
	arrived  atomic.Int64
	finished atomic.Int64
	inflight atomic.Int64
	sales    []productSales
	products []string
}

type productSales struct{ orders, units, pendingUnknown atomic.Int64 }

// journey is one shopper's way through the steps.
type journey struct {
	user    int
	product int
	step    int
	rep     int
	token   []byte
	orderID string
	rnd     uint64
}

type job struct {
	j        *journey
	intended time.Time
}

func newGenerator(sc *Scenario, addrs []string, users *Users, rec *Recorder) *Generator {
	g := &Generator{sc: sc, addrs: addrs, users: users, rec: rec,
		jobs:  make(chan job, 1<<16),
		sales: make([]productSales, sc.Products),
	}
	for _, addr := range addrs {
		g.clients = append(g.clients, &fasthttp.HostClient{
			Addr: addr, MaxConns: max(1, sc.Connections/len(addrs)), MaxIdleConnDuration: time.Minute,
			ReadTimeout: sc.Timeout, WriteTimeout: sc.Timeout, NoDefaultUserAgentHeader: true,
			ReadBufferSize: 16 << 10, MaxConnWaitTimeout: sc.Timeout,
		})
	}
	for i := range sc.Products {
		g.products = append(g.products, productID(i))
	}
	return g
}

func productID(i int) string { return "p" + strconv.Itoa(i+1) }

// pickProduct is the product a new shopper goes for: p1 with the
// scenario's hot share, else any other alike (all alike without one).
func (g *Generator) pickProduct(rnd *rand.Rand) int {
	n := g.sc.Products
	if g.sc.Hot <= 0 || n == 1 {
		return rnd.IntN(n)
	}
	if rnd.Float64() < g.sc.Hot {
		return 0
	}
	return 1 + rnd.IntN(n-1)
}

// Preconnect opens every connection before the clock starts, with one
// status call each that is not recorded.
func (g *Generator) Preconnect(ctx context.Context) error {
	var wg sync.WaitGroup
	var failed atomic.Int64
	var mu sync.Mutex
	var first error
	for i := range g.sc.Connections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			edge := i % len(g.addrs)
			req.SetRequestURI("http://" + g.addrs[edge] + "/api/seckill/status?productId=" + g.products[0])
			if err := g.clients[edge].DoTimeout(req, resp, 30*time.Second); err != nil {
				failed.Add(1)
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("preconnect: %d of %d connections failed, e.g. %v", n, g.sc.Connections, first)
	}
	return ctx.Err()
}

// Run plays the scenario from start and returns when every journey ended
// or the drain time ran out after the load phase.
func (g *Generator) Run(ctx context.Context, start time.Time) {
	sc := g.sc
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	if sc.Mode == "closed" {
		g.runClosed(wctx, start)
		return
	}
	for range sc.Connections {
		g.wg.Add(1)
		go g.worker(wctx)
	}
	p := NewPacer(sc.Rate, sc.Burst, sc.Duration, sc.Tick)
	seed := rand.New(rand.NewPCG(uint64(start.UnixNano()), 7))
	p.Run(ctx, start, func(j int64, intended time.Time) {
		jr := &journey{user: int(j), product: g.pickProduct(seed), rnd: seed.Uint64()}
		g.arrived.Add(1)
		if !g.skipTo(jr, 0) {
			return
		}
		g.active.Add(1)
		g.push(job{jr, intended.Add(sc.Steps[jr.step].Think)})
	})
	// Arrivals are over: let the journeys in progress end.
	deadline := time.Now().Add(sc.Drain)
	for g.active.Load() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	stopWorkers()
	g.wg.Wait()
}

func (g *Generator) runClosed(ctx context.Context, start time.Time) {
	sc := g.sc
	if d := time.Until(start); d > 0 {
		time.Sleep(d)
	}
	loadEnd := start.Add(sc.Duration)
	hardEnd := loadEnd.Add(sc.Drain)
	var next atomic.Int64
	for w := range sc.Connections {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(w)))
			var req fasthttp.Request
			var resp fasthttp.Response
			for time.Now().Before(loadEnd) && ctx.Err() == nil {
				j := next.Add(1) - 1
				jr := &journey{user: int(j), product: g.pickProduct(rnd), rnd: rnd.Uint64()}
				g.arrived.Add(1)
				if !g.skipTo(jr, 0) {
					continue
				}
				g.active.Add(1)
				delay := sc.Steps[jr.step].Think
				for {
					if delay > 0 {
						time.Sleep(delay)
					}
					if time.Now().After(hardEnd) || ctx.Err() != nil {
						g.active.Add(-1)
						return
					}
					var done bool
					now := time.Now()
					delay, done = g.exec(jr, now, &req, &resp)
					if done {
						break
					}
				}
			}
		}()
	}
	g.wg.Wait()
}

func (g *Generator) worker(ctx context.Context) {
	defer g.wg.Done()
	var req fasthttp.Request
	var resp fasthttp.Response
	for {
		select {
		case <-ctx.Done():
			return
		case jb := <-g.jobs:
			delay, done := g.exec(jb.j, jb.intended, &req, &resp)
			if done {
				continue
			}
			intended := time.Now().Add(delay)
			if delay <= 0 {
				g.push(job{jb.j, intended})
			} else {
				jr := jb.j
				time.AfterFunc(delay, func() { g.push(job{jr, intended}) })
			}
		}
	}
}

// push queues a job without ever blocking a worker (which would deadlock
// when every worker pushes into a full queue).
func (g *Generator) push(jb job) {
	select {
	case g.jobs <- jb:
	default:
		go func() { g.jobs <- jb }()
	}
}

// skipTo moves j to the first step at or after i that it makes (Prob);
// false (and the journey is over) when there is none.
func (g *Generator) skipTo(j *journey, i int) bool {
	for ; i < len(g.sc.Steps); i++ {
		p := g.sc.Steps[i].Prob
		if p >= 1 || j.rand() < p {
			j.step, j.rep = i, 0
			return true
		}
	}
	return false
}

func (j *journey) rand() float64 {
	// splitmix64: a journey's own stream, no shared generator.
	j.rnd += 0x9e3779b97f4a7c15
	z := j.rnd
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// exec sends j's current step, records it, and says when the next one is
// due (delay after now) or that the journey is over.
func (g *Generator) exec(j *journey, intended time.Time, req *fasthttp.Request, resp *fasthttp.Response) (time.Duration, bool) {
	sc := g.sc
	st := &sc.Steps[j.step]
	product := g.products[j.product]
	edge := j.user % len(g.addrs)
	req.Reset()
	resp.Reset()
	var uri []byte
	uri = append(uri, "http://"...)
	uri = append(uri, g.addrs[edge]...)
	switch st.Call {
	case "page":
		uri = append(append(uri, "/seckill/"...), product...)
	case "status":
		uri = append(append(uri, "/api/seckill/status?productId="...), product...)
	case "token":
		uri = append(uri, "/api/seckill/token"...)
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.SetBodyString(`{"productId":"` + product + `"}`)
	case "do":
		if len(j.token) == 0 {
			// The edges' sale.token_ttl (env.go): an edge that rebuilt a
			// sale refuses tokens expiring before rebuild time + token_ttl,
			// i.e. minted before it, and a shorter life would look older.
			j.token = g.users.Token(j.token[:0], g.users.ID(j.user), product, edgeTokenTTL)
		}
		uri = append(uri, "/api/seckill/do"...)
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		b := append([]byte(nil), `{"productId":"`...)
		b = append(b, product...)
		b = append(b, `","token":"`...)
		b = append(b, j.token...)
		b = append(b, `","quantity":`...)
		b = strconv.AppendInt(b, int64(sc.Quantity), 10)
		b = append(b, '}')
		req.SetBodyRaw(b)
	case "result":
		uri = append(append(uri, "/api/seckill/result?orderId="...), j.orderID...)
		uri = append(append(uri, "&productId="...), product...)
	case "origin":
		uri = append(uri, strings.ReplaceAll(st.Path, "{product}", product)...)
	}
	req.SetRequestURIBytes(uri)
	switch st.Call {
	case "token", "do", "result":
		req.Header.Set("Authorization", "Bearer "+g.users.Session(j.user))
	}
	g.inflight.Add(1)
	sent := time.Now()
	err := g.clients[edge].DoDeadline(req, resp, sent.Add(sc.Timeout))
	end := time.Now()
	g.inflight.Add(-1)
	status, code := 0, ""
	body := resp.Body()
	if err != nil {
		code = errorCode(err)
	} else {
		status = resp.StatusCode()
		if status >= 300 {
			code = jsonStr(body, "code")
		}
	}
	g.rec.Record(st.Call, intended, sent, end, status, code)
	if st.Call == "do" && g.observe != nil {
		g.observe(j.product, status, code)
	}

	repeat := func() (time.Duration, bool) {
		j.rep++
		return st.Every, false
	}
	advance := func() (time.Duration, bool) {
		if !g.skipTo(j, j.step+1) {
			return g.finish()
		}
		return sc.Steps[j.step].Think, false
	}
	more := j.rep+1 < st.Repeat
	switch st.Call {
	case "status":
		if st.Until == "active" && status == 200 && jsonStr(body, "status") == "active" {
			return advance()
		}
		if more {
			return repeat()
		}
		return advance()
	case "token":
		if status != 200 {
			return g.finish()
		}
		j.token = append(j.token[:0], jsonStr(body, "token")...)
		return advance()
	case "do":
		j.token = j.token[:0] // one-time
		if status == 200 {
			g.sales[j.product].orders.Add(1)
			g.sales[j.product].units.Add(int64(sc.Quantity))
		} else if status == 503 || status == 0 {
			g.sales[j.product].pendingUnknown.Add(1)
		}
		if id := jsonStr(body, "orderId"); id != "" {
			j.orderID = id
			return advance()
		}
		return g.finish()
	case "result":
		if st.Until == "done" && more && (status != 200 || jsonStr(body, "status") == "pending") {
			return repeat()
		}
		if st.Until == "done" || !more {
			return advance()
		}
		return repeat()
	}
	if more {
		return repeat()
	}
	return advance()
}

func (g *Generator) finish() (time.Duration, bool) {
	g.active.Add(-1)
	g.finished.Add(1)
	return 0, true
}

// errorCode names a transport error for the report.
func errorCode(err error) string {
	switch {
	case err == fasthttp.ErrTimeout || err == fasthttp.ErrDialTimeout || strings.Contains(err.Error(), "timeout"):
		return "TIMEOUT"
	case strings.Contains(err.Error(), "connection refused"):
		return "CONN_REFUSED"
	case strings.Contains(err.Error(), "reset by peer") || err == io.EOF || strings.Contains(err.Error(), "closed"):
		return "CONN_RESET"
	case err == fasthttp.ErrNoFreeConns:
		return "NO_FREE_CONN"
	}
	return "IO_ERROR"
}

// jsonStr finds "key":"value" in a flat JSON object (the edge's answers)
// and returns value, or "".
func jsonStr(b []byte, key string) string {
	var pat [64]byte
	p := append(append(append(pat[:0], '"'), key...), `":`...)
	i := bytes.Index(b, p)
	if i < 0 {
		return ""
	}
	rest := bytes.TrimLeft(b[i+len(p):], " ")
	if len(rest) == 0 || rest[0] != '"' {
		return ""
	}
	rest = rest[1:]
	k := bytes.IndexByte(rest, '"')
	if k < 0 {
		return ""
	}
	return string(rest[:k])
}

// progress prints a line to w every second until ctx is done.
func (g *Generator) progress(ctx context.Context, w io.Writer, start time.Time, planned int64) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastDone int64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			el := now.Sub(start)
			if el < 0 {
				continue
			}
			done := g.rec.done.Load()
			sec := int(el/time.Second) - 1
			p99, _ := g.rec.secondP99(sec)
			arr := fmt.Sprint(g.arrived.Load())
			if planned > 0 {
				arr += "/" + fmt.Sprint(planned)
			}
			fmt.Fprintf(w, "[%5.1fs] shoppers %s active %d | requests %d (%d/s) in flight %d | p99 last s %.2fms | errors %d | send lag max %dms\n",
				el.Seconds(), arr, g.active.Load(), done, done-lastDone, g.inflight.Load(), p99, g.rec.errs.Load(), g.rec.lateMs.Load())
			lastDone = done
		}
	}
}
