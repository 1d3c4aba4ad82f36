package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// The calls of a waiting-room shopper, also the report's endpoint names.
// "queue" is the status poll (GET /api/seckill/queue).
var wrCallNames = []string{"challenge", "join", "queue", "token", "do"}

// wrShopper is one shopper's journey; only her goroutine writes it until
// the load is over.
type wrShopper struct {
	idx      int // arrival order, 0-based (the schedule's)
	edge     int
	pre      bool // joins before the opening
	early    bool // also tries to buy right after joining
	arrive   time.Time
	ticket   string
	ticketID string

	joinStatus   string
	position     int64 // the first position seen after the opening
	admittedAt   time.Time
	admittedPos  int64
	earlyAnswer  string // what the early purchase attempt was told
	earlyBought  bool   // ... and whether it got a token or an order: out of turn
	outcome      string
	lastPosition int64
	// etas are the estimates she was shown after the opening (the pre-queue's
	// join says only "the opening"): when, and etaMs.
	etas []etaSeen
	// solveMs is how long bench took to solve her proof of work.
	solveMs float64
}

// inPrequeue: her join was answered as the pre-queue's (the lottery ranks
// her), which her schedule alone does not decide: a join scheduled just
// before the opening may arrive after it (the proof of work, a slow
// answer) and get a FIFO place.
func (s *wrShopper) inPrequeue() bool { return s.joinStatus == "prequeue" }

// etaSeen is one answer's estimate.
type etaSeen struct {
	at  time.Time
	eta int64
}

// wrAnswer is every field bench reads from the room's, token's and do's
// answers (one flat JSON object each).
type wrAnswer struct {
	Code            string `json:"code"`
	Status          string `json:"status"`
	Position        int64  `json:"position"`
	Admitted        bool   `json:"admitted"`
	EtaMs           int64  `json:"etaMs"`
	OpensMs         int64  `json:"opensMs"`
	AdmittedUntilMs int64  `json:"admittedUntilMs"`
	Ticket          string `json:"ticket"`
	TicketID        string `json:"ticketId"`
	SoldOut         bool   `json:"soldOut"`
	Challenge       string `json:"challenge"`
	Token           string `json:"token"`
	OrderID         string `json:"orderId"`
}

// RoomResult is what the waitingroom scenario adds to a run's result.
type RoomResult struct {
	Edges          int            `json:"edges"`
	Redis          string         `json:"redis"`
	Shoppers       int            `json:"shoppers"`
	PreJoins       int            `json:"pre_joins"`
	PostJoins      int            `json:"post_joins"`
	AdmitPerMinute int            `json:"admit_per_minute"`
	OpensAt        string         `json:"opens_at"`
	Joined         int            `json:"joined"`
	JoinStatuses   map[string]int `json:"join_statuses"`
	Admitted       int            `json:"admitted"` // shoppers who saw their admission
	Outcomes       map[string]int `json:"outcomes"`
	Sold           int64          `json:"sold"` // do answered 200 (units)
	Stock          int            `json:"stock"`

	// Admission against the configured rate, over [rate_skip, rate_skip +
	// rate_window] after the opening: per edge as its GET /admin/waitroom
	// showed it, and as its shoppers saw it (the highest position admitted).
	RateWindowS float64         `json:"rate_window_s"`
	AdminRate   []EdgeRate      `json:"admin_rate"`
	FrontRate   []EdgeRate      `json:"front_rate"`
	Samples     [][]AdmitSample `json:"admin_samples"` // per edge
	MaxDevPct   *float64        `json:"max_dev_pct"`   // the worst of AdminRate's deviations (nil: an edge had no readings)

	// Out of turn: purchases before one's admission. Early attempts must be
	// refused 403 NOT_ADMITTED; an admission ahead of the configured
	// schedule (position > N(t) + a second's worth) is counted too.
	EarlyTries      int            `json:"early_tries"`
	EarlyAnswers    map[string]int `json:"early_answers"`
	EarlySucceeded  int            `json:"early_succeeded"`
	AheadOfSchedule int            `json:"ahead_of_schedule"`
	OutOfTurn       int            `json:"out_of_turn"`

	Fairness Fairness `json:"fairness"`
	Lottery  Lottery  `json:"lottery"`

	// ETA is how right the estimates were (roometa.go); PowSolveMs what
	// the proof of work cost bench's shoppers (nil: no challenge).
	ETA        ETAAccuracy `json:"eta"`
	PowSolveMs *PowSolve   `json:"pow_solve_ms,omitempty"`
}

// PowSolve is the proof of work's cost on bench's machine.
type PowSolve struct {
	N    int     `json:"n"`
	Bits int     `json:"bits"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
}

// EdgeRate is the admission rate one edge showed over the window.
type EdgeRate struct {
	Edge      int     `json:"edge"`
	From, To  int64   `json:"-"`
	Admitted  int64   `json:"admitted"` // over the window
	PerMinute float64 `json:"per_minute"`
	DevPct    float64 `json:"dev_pct"` // against the configured rate
	Err       string  `json:"error,omitempty"`
}

// AdmitSample is one GET /admin/waitroom reading of the sale.
type AdmitSample struct {
	T        float64 `json:"t"` // seconds since the opening
	Admitted int64   `json:"admitted"`
	Waiting  int64   `json:"waiting"`
	Active   int64   `json:"active"`
	Frontier int64   `json:"frontier"` // N(t), the highest place let in
	Status   string  `json:"status"`
}

// Fairness is the pre-queue's lottery judged by arrival order.
type Fairness struct {
	N        int         `json:"n"` // pre-queue shoppers with a position
	Spearman float64     `json:"spearman"`
	ChiSq    float64     `json:"chi_square"`
	DF       int         `json:"df"`
	P        float64     `json:"p_value"`
	Table    [10][10]int `json:"deciles"` // arrival decile × position decile
	// PostSpearman is the same correlation for those who joined after the
	// opening: FIFO places, so near 1 (0 when too few).
	PostSpearman float64 `json:"post_spearman"`
	PostN        int     `json:"post_n"`
	Err          string  `json:"error,omitempty"`
}

// Lottery is the check that the published key reproduces the order.
type Lottery struct {
	Commit       string `json:"commit"`
	Key          string `json:"key"`
	Members      int    `json:"members"`
	Listed       int    `json:"listed"`
	CommitOK     bool   `json:"commit_ok"`
	OrderOK      bool   `json:"order_ok"`     // HMAC-SHA256(key, ticketId) ranks = the admin's list
	PositionsOK  int    `json:"positions_ok"` // shoppers whose position is their ticket's rank
	PositionsBad int    `json:"positions_bad"`
	Reproduced   bool   `json:"reproduced"`
	Err          string `json:"error,omitempty"`
}

// wrRun is one play of the scenario.
type wrRun struct {
	sc       *Scenario
	w        *Room
	product  string
	addrs    []string
	admins   []string
	clients  []*fasthttp.HostClient
	users    *Users
	rec      *Recorder
	opens    time.Time
	shoppers []wrShopper

	arrived, joined, admitted, finished, bought atomic.Int64
	inflight                                    atomic.Int64
}

// runRoom is runScenario for a scenario with a waiting_room:
// section: its edges on one standalone redis-server, the room's sale, its
// shoppers, and the room's figures.
func runRoom(ctx context.Context, root string, sc *Scenario, f runFlags, stderr io.Writer) (*Result, error) {
	switch {
	case f.target != "":
		return nil, errors.New("the waitingroom scenario starts its own Redis and edges: leave -target out")
	case f.kafka != "bench":
		return nil, errors.New("the waitingroom scenario's edges share one broker: -kafka bench (the default)")
	case f.pin || f.pprof:
		return nil, errors.New("-pin and -pprof are not for the waitingroom scenario (several edges)")
	}
	w := sc.WaitingRoom
	dir, progress, cleanup, err := runDir(sc.Name, f.keep, f.quiet, stderr)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if err := need("the waitingroom scenario", toolRedis); err != nil {
		return nil, err
	}
	env := newEnv(EnvOptions{Root: root, Dir: dir, GoMaxProcs: f.gomaxprocs, InfraCPU: -1, Kafka: f.kafka,
		Consumer: f.consumer, ClickHouse: f.clickhouse, ProxyBin: f.proxyBin, ProxyRev: f.proxyRev, Quiet: progress})
	defer env.Close()
	res := runResult(root, sc, f)
	wr := &RoomResult{Edges: w.Edges, Redis: "one standalone redis-server", Shoppers: w.shoppers(), PreJoins: w.PreJoins,
		PostJoins: w.PostJoins, AdmitPerMinute: w.AdmitPerMinute, Stock: sc.Stock,
		JoinStatuses: map[string]int{}, Outcomes: map[string]int{}, EarlyAnswers: map[string]int{}}
	res.WaitingRoom = wr
	t0 := time.Now()
	if err := env.build("./cmd/proxy", "./bench/origin"); err != nil {
		return nil, err
	}
	fmt.Fprintln(progress, "bench: starting redis-server, kafka, origin, edges")
	if err := env.StartRedis(ctx); err != nil {
		return nil, err
	}
	if err := env.StartKafka(ctx); err != nil {
		return nil, err
	}
	if f.clickhouse {
		if err := env.StartClickHouse(); err != nil {
			return nil, err
		}
	}
	if err := env.StartOrigin(ctx); err != nil {
		return nil, err
	}
	waitQuiet(progress, f.quietPct, f.quietWait)
	// The sale's times are fixed in the edges' config: the opening is
	// startup + pre_over from now, the pre-queue already open (it opened
	// a few seconds before the first join).
	opens := time.Now().Add(w.Startup + w.PreOver).Truncate(time.Second)
	room := map[string]any{
		"enabled": true, "prequeue_opens": (w.Startup + w.PreOver + 5*time.Second).String(),
		"admit_per_minute": w.AdmitPerMinute, "max_active": w.MaxActive, "session": w.Session.String(),
		"order": w.Order, "challenge": map[string]any{"difficulty": w.Challenge},
	}
	product := productID(0)
	spec := EdgeSpec{RedisAddr: env.RedisAddr, OriginAddr: env.OriginAddr, Extra: sc.Edge,
		Products: []Activity{{ID: product, Stock: sc.Stock, Limit: sc.Limit, Price: sc.Price, Start: opens,
			End: opens.Add(2 * time.Hour), WaitingRoom: room}}}
	set, err := env.StartEdges(ctx, spec, w.Edges, f.consumer == "separate", f.gomaxprocs)
	if err != nil {
		return nil, err
	}
	res.Target = fmt.Sprintf("%d edges started by bench on one standalone redis-server", w.Edges)
	wr.OpensAt = opens.UTC().Format(time.RFC3339)
	fmt.Fprintf(progress, "bench: %d edges %s (GOMAXPROCS=%d) ready after %.1fs; redis %s; kafka %s; the sale opens at %s\n",
		w.Edges, strings.Join(set.Addrs, " "), f.gomaxprocs, time.Since(t0).Seconds(), env.RedisAddr, env.Brokers, opens.Format("15:04:05"))

	users, err := newUsers(sc.Users, benchSessionSecret, benchTokenSecret)
	if err != nil {
		return nil, err
	}
	for i := range w.shoppers() {
		users.Session(i) // signed before the clock starts, as browsers hold them
	}
	first := opens.Add(-w.PreOver)
	if late := time.Until(first); late < 500*time.Millisecond {
		res.Notes = append(res.Notes, fmt.Sprintf("the edges took long to start: the pre-queue's joins are squeezed into the %.1fs left before the opening (startup: more)", time.Until(opens).Seconds()))
		first = time.Now().Add(500 * time.Millisecond)
	}
	r := &wrRun{sc: sc, w: w, product: product, addrs: set.Addrs, admins: set.Admins, users: users, opens: opens,
		rec: newRecorder(first, wrCallNames)}
	r.plan(first)
	conns := max(1, sc.Connections/len(r.addrs))
	for _, a := range r.addrs {
		r.clients = append(r.clients, &fasthttp.HostClient{Addr: a, MaxConns: conns, MaxIdleConnDuration: time.Minute,
			ReadTimeout: sc.Timeout, WriteTimeout: sc.Timeout, NoDefaultUserAgentHeader: true, MaxConnWaitTimeout: sc.Timeout})
	}

	var watches []*ProcWatch
	for _, p := range append(append([]*Proc{}, set.Procs...), env.Redis, env.Kafka, env.Orders) {
		if p != nil {
			pid := p.Pid()
			watches = append(watches, watchProc(p.Name, func() []int { return []int{pid} }))
		}
	}
	self := os.Getpid()
	watches = append(watches, watchProc("bench (load generator)", func() []int { return []int{self} }))
	mb0, mt0 := machineTicks()
	for _, wt := range watches {
		wt.Reset()
	}
	fmt.Fprintf(progress, "bench: %s: %s\n", sc.Name, describeRoom(sc))

	// Hard end: everyone admitted at the configured rate, plus drain.
	hardEnd := opens.Add(w.PostOver + w.admissionLasts() + sc.Drain)
	lctx, stopLoad := context.WithDeadline(ctx, hardEnd)
	defer stopLoad()
	pctx, stopSide := context.WithCancel(ctx)
	samples := make([][]AdmitSample, len(r.admins))
	var side sync.WaitGroup
	for i, a := range r.admins {
		side.Add(1)
		go func() { defer side.Done(); samples[i] = r.sampleAdmin(pctx, a, 500*time.Millisecond) }()
	}
	side.Add(1)
	go func() { defer side.Done(); r.progress(pctx, progress) }()
	r.play(lctx)
	end := time.Now()
	stopSide()
	side.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	for _, wt := range watches {
		res.Processes = append(res.Processes, wt.Stat())
	}
	if mb1, mt1 := machineTicks(); mt1 > mt0 {
		res.MachineBusyPct = 100 * float64(mb1-mb0) / float64(mt1-mt0) * float64(runtime.NumCPU())
	}
	window := end.Sub(r.rec.start).Seconds()
	if last := lastCompletion(r.rec); !last.IsZero() {
		window = last.Sub(r.rec.start).Seconds()
	}
	res.Seconds = window
	res.Endpoints, res.Total, res.SendLag = r.rec.results(window)
	res.Arrived = r.arrived.Load()
	res.Unfinished = int64(w.shoppers()) - r.finished.Load()
	res.SessionsSigned = users.signed.Load()
	res.Sales = []ProductSale{{Product: product, Stock: int64(sc.Stock), Orders: r.bought.Load(), Units: r.bought.Load()}}
	res.Sales[0].OverStock = max(0, res.Sales[0].Units-res.Sales[0].Stock)

	r.figures(wr, samples)
	fmt.Fprintln(progress, "bench: the lottery: GET /api/seckill/queue/lottery and /admin/waitroom/lottery")
	wr.Lottery = r.checkLottery()

	fmt.Fprintln(progress, "bench: proxy reconcile (waits for the order pipeline to drain)")
	res.Reconcile = proxyReconcile(ctx, env.bins["proxy"], set.ConsumerConfig)
	res.Notes = append(res.Notes, exitNotes(set.Procs...)...)
	env.Close()
	out := outDir(root, f, sc, res.Started)
	if err := res.write(out); err != nil {
		return nil, err
	}
	res.OutDir = out
	return res, nil
}

// plan lays out the arrivals: pre_joins evenly over [first, opening),
// post_joins evenly over [opening, opening + post_over); shopper i to
// edge i mod n; a fixed seed picks the early ones.
func (r *wrRun) plan(first time.Time) {
	w := r.w
	rnd := rand.New(rand.NewPCG(15, 15))
	r.shoppers = make([]wrShopper, w.shoppers())
	preSpan := r.opens.Sub(first)
	for i := range r.shoppers {
		s := &r.shoppers[i]
		s.idx, s.edge = i, i%len(r.addrs)
		if i < w.PreJoins {
			s.pre = true
			s.arrive = first.Add(time.Duration(float64(preSpan) * float64(i) / float64(w.PreJoins)))
		} else {
			k := i - w.PreJoins
			s.arrive = r.opens.Add(time.Duration(float64(w.PostOver) * float64(k) / float64(max(1, w.PostJoins))))
		}
		s.early = rnd.Float64() < w.Early
	}
}

// play runs every shopper's journey and returns when all ended (or ctx's
// deadline passed and their last requests returned).
func (r *wrRun) play(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range r.shoppers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.journey(ctx, &r.shoppers[i])
			r.finished.Add(1)
		}()
	}
	wg.Wait()
}

// sleepUntil waits for t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

func (r *wrRun) journey(ctx context.Context, s *wrShopper) {
	s.outcome = "unfinished"
	if !sleepUntil(ctx, s.arrive) {
		return
	}
	r.arrived.Add(1)
	rnd := rand.New(rand.NewPCG(uint64(s.idx), 99))
	body := []byte(`{"productId":"` + r.product + `"}`)
	joinBody := body
	if r.w.Challenge > 0 {
		st, c := r.call(s, "challenge", "GET", "/api/seckill/challenge?productId="+r.product, nil, s.arrive)
		if st != 200 {
			s.outcome = "challenge refused " + orDefault(c.Code, httpCodeName(st))
			return
		}
		t0 := time.Now()
		nonce := solvePow(c.Challenge, r.w.Challenge)
		s.solveMs = float64(time.Since(t0).Microseconds()) / 1000
		joinBody = []byte(`{"productId":"` + r.product + `","challenge":"` + c.Challenge + `","nonce":"` + nonce + `"}`)
	}
	st, a := r.call(s, "join", "POST", "/api/seckill/queue", joinBody, s.arrive)
	if st != 200 {
		s.outcome = "join refused " + orDefault(a.Code, httpCodeName(st))
		return
	}
	r.joined.Add(1)
	s.ticket, s.joinStatus = a.Ticket, a.Status
	s.ticketID = orDefault(a.TicketID, ticketID(a.Ticket))
	if s.early && !a.Admitted {
		// Before her turn: the token call must refuse (403 NOT_ADMITTED);
		// a token here is a purchase out of turn, and so is an order.
		st, t := r.call(s, "token", "POST", "/api/seckill/token", body, time.Now())
		s.earlyAnswer = orDefault(t.Code, httpCodeName(st))
		if st == 200 {
			s.earlyAnswer = "OK"
			s.earlyBought = true
			if st, _ := r.buy(s, t.Token); st == 200 {
				s.earlyAnswer = "OK, and the purchase went through"
			}
		}
	}
	r.seen(s, a, time.Now())
	for !a.Admitted {
		switch a.Status {
		case "closed", "expired":
			s.outcome = a.Status
			if a.SoldOut {
				s.outcome = "closed: sold out"
			}
			return
		}
		// As the page does: every poll_min..poll_max, or when the line is
		// due to reach her place if that is sooner.
		wait := r.w.PollMin + time.Duration(rnd.Int64N(int64(r.w.PollMax-r.w.PollMin)+1))
		if a.Status == "waiting" && a.EtaMs > 0 {
			wait = min(wait, time.Duration(a.EtaMs+50)*time.Millisecond)
		}
		next := time.Now().Add(wait)
		if !sleepUntil(ctx, next) {
			return
		}
		st, a = r.call(s, "queue", "GET", "/api/seckill/queue?productId="+r.product, nil, next)
		if st == 404 {
			s.outcome = "lost its place: " + a.Code
			return
		}
		if st != 200 {
			a = wrAnswer{Status: "waiting"} // an error answer: poll again
			continue
		}
		r.seen(s, a, time.Now())
	}
	// Her turn: the token call hands out the token with the admission.
	st, t := r.call(s, "token", "POST", "/api/seckill/token", body, time.Now())
	if st != 200 {
		s.outcome = "token refused " + orDefault(t.Code, httpCodeName(st))
		return
	}
	st, d := r.buy(s, t.Token)
	switch {
	case st == 200:
		s.outcome = "bought"
	default:
		s.outcome = "do " + orDefault(d.Code, httpCodeName(st))
	}
}

// seen books what a room answer said: the first position after the
// opening, and the admission.
func (r *wrRun) seen(s *wrShopper, a wrAnswer, now time.Time) {
	if a.Ticket != "" {
		s.ticket = a.Ticket // reissued with her place, as a browser's cookie is
	}
	if a.Position > 0 {
		s.lastPosition = a.Position
		if s.position == 0 && a.Status != "prequeue" {
			s.position = a.Position
		}
	}
	if a.Admitted && s.admittedAt.IsZero() {
		s.admittedAt, s.admittedPos = now, a.Position
		r.admitted.Add(1)
	}
	if !a.Admitted && a.Status == "waiting" && a.EtaMs > 0 && !now.Before(r.opens) {
		s.etas = append(s.etas, etaSeen{at: now, eta: a.EtaMs})
	}
}

func (r *wrRun) buy(s *wrShopper, token string) (int, wrAnswer) {
	b := `{"productId":"` + r.product + `","token":"` + token + `","quantity":1}`
	st, d := r.call(s, "do", "POST", "/api/seckill/do", []byte(b), time.Now())
	if st == 200 {
		r.bought.Add(1)
	}
	return st, d
}

// call sends one request of shopper s to her edge, books it under name
// (latency from intended) and decodes the answer.
func (r *wrRun) call(s *wrShopper, name, method, path string, body []byte, intended time.Time) (int, wrAnswer) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + r.addrs[s.edge] + path)
	req.Header.SetMethod(method)
	req.Header.Set("Authorization", "Bearer "+r.users.Session(s.idx))
	if s.ticket != "" {
		req.Header.Set("X-Queue-Ticket", s.ticket)
		req.Header.SetCookie("fg_wr_"+r.product, s.ticket)
	}
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBody(body)
	}
	r.inflight.Add(1)
	sent := time.Now()
	err := r.clients[s.edge].DoDeadline(req, resp, sent.Add(r.sc.Timeout))
	end := time.Now()
	r.inflight.Add(-1)
	var a wrAnswer
	status, code := 0, ""
	if err != nil {
		code = errorCode(err)
	} else {
		status = resp.StatusCode()
		_ = json.Unmarshal(resp.Body(), &a)
		if status >= 300 {
			code = a.Code
		}
	}
	r.rec.Record(name, intended, sent, end, status, code)
	return status, a
}

// progress prints a line every second until ctx ends.
func (r *wrRun) progress(ctx context.Context, w io.Writer) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			done := r.rec.done.Load()
			fmt.Fprintf(w, "[%+6.1fs from the opening] arrived %d joined %d admitted %d bought %d finished %d | requests %d (%d/s) in flight %d | errors %d\n",
				now.Sub(r.opens).Seconds(), r.arrived.Load(), r.joined.Load(), r.admitted.Load(), r.bought.Load(), r.finished.Load(),
				done, done-last, r.inflight.Load(), r.rec.errs.Load())
			last = done
		}
	}
}

// adminRoom is GET /admin/waitroom's answer (the fields bench reads).
type adminRoom struct {
	Sales []struct {
		ProductID      string `json:"productId"`
		Status         string `json:"status"`
		Waiting        int64  `json:"waiting"`
		Admitted       int64  `json:"admitted"`
		Active         int64  `json:"active"`
		Frontier       int64  `json:"frontier"`
		AdmitPerMinute int64  `json:"admitPerMinute"`
		Commit         string `json:"commit"`
	} `json:"sales"`
}

// sampleAdmin reads the sale's line of an edge's GET /admin/waitroom every
// interval until ctx ends.
func (r *wrRun) sampleAdmin(ctx context.Context, admin string, interval time.Duration) []AdmitSample {
	c := &http.Client{Timeout: 2 * time.Second}
	t := time.NewTicker(interval)
	defer t.Stop()
	var out []AdmitSample
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		at := time.Now()
		resp, err := c.Get("http://" + admin + "/admin/waitroom")
		if err != nil {
			continue
		}
		var room adminRoom
		err = json.NewDecoder(resp.Body).Decode(&room)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			continue
		}
		for _, s := range room.Sales {
			if s.ProductID == r.product {
				out = append(out, AdmitSample{T: at.Sub(r.opens).Seconds(), Admitted: s.Admitted, Waiting: s.Waiting, Active: s.Active, Frontier: s.Frontier, Status: s.Status})
			}
		}
	}
}

// figures fills in the room's figures from the shoppers' journeys and the
// admin samples.
func (r *wrRun) figures(wr *RoomResult, samples [][]AdmitSample) {
	w := r.w
	wr.Samples, wr.AdminRate, wr.FrontRate, wr.MaxDevPct = samples, nil, nil, nil
	worst, known := 0.0, len(samples) > 0
	wr.Joined, wr.Admitted, wr.AheadOfSchedule, wr.EarlyTries, wr.EarlySucceeded = 0, 0, 0, 0, 0
	wr.JoinStatuses, wr.Outcomes, wr.EarlyAnswers = map[string]int{}, map[string]int{}, map[string]int{}
	wr.Fairness = Fairness{}
	from, to := w.RateSkip.Seconds(), (w.RateSkip + w.RateWindow).Seconds()
	wr.RateWindowS = w.RateWindow.Seconds()
	want := float64(w.AdmitPerMinute)
	for i, ss := range samples {
		er := EdgeRate{Edge: i + 1}
		a, okA := sampleAt(ss, from)
		b, okB := sampleAt(ss, to)
		if !okA || !okB || b.T <= a.T {
			er.Err = fmt.Sprintf("no GET /admin/waitroom readings around %.0fs and %.0fs after the opening", from, to)
		} else {
			er.Admitted = b.Admitted - a.Admitted
			er.PerMinute = float64(er.Admitted) / (b.T - a.T) * 60
			er.DevPct = 100 * (er.PerMinute/want - 1)
			worst = math.Max(worst, math.Abs(er.DevPct))
		}
		if er.Err != "" {
			known = false
		}
		wr.AdminRate = append(wr.AdminRate, er)
	}
	if known {
		wr.MaxDevPct = &worst
	}
	// The admission front each edge's shoppers saw: the highest position
	// admitted by t. It trails N(t) by a poll (1-2 s), alike at both ends
	// of the window.
	for e := range r.addrs {
		er := EdgeRate{Edge: e + 1}
		fa, fb := r.front(e, from), r.front(e, to)
		er.Admitted = fb - fa
		er.PerMinute = float64(er.Admitted) / (to - from) * 60
		er.DevPct = 100 * (er.PerMinute/want - 1)
		wr.FrontRate = append(wr.FrontRate, er)
	}

	slack := float64(w.AdmitPerMinute) / 60 // a second's worth of admissions
	var arrival, position, postArrival, postPosition []float64
	for i := range r.shoppers {
		s := &r.shoppers[i]
		wr.Outcomes[s.outcome]++
		if s.joinStatus != "" {
			wr.Joined++
			wr.JoinStatuses[s.joinStatus]++
		}
		if !s.admittedAt.IsZero() {
			wr.Admitted++
			n := float64(w.AdmitPerMinute) * s.admittedAt.Sub(r.opens).Minutes()
			if float64(s.admittedPos) > n+slack {
				wr.AheadOfSchedule++
			}
		}
		if s.earlyAnswer != "" {
			wr.EarlyTries++
			wr.EarlyAnswers[s.earlyAnswer]++
			if s.earlyBought {
				wr.EarlySucceeded++
			}
		}
		if s.inPrequeue() && s.position > 0 {
			arrival = append(arrival, float64(s.idx))
			position = append(position, float64(s.position))
		}
		if !s.inPrequeue() && s.position > 0 {
			postArrival = append(postArrival, float64(s.idx))
			postPosition = append(postPosition, float64(s.position))
		}
	}
	wr.OutOfTurn = wr.EarlySucceeded + wr.AheadOfSchedule
	wr.ETA = r.etaAccuracy()
	var solves []float64
	for i := range r.shoppers {
		if ms := r.shoppers[i].solveMs; ms > 0 {
			solves = append(solves, ms)
		}
	}
	if len(solves) > 0 {
		sort.Float64s(solves)
		wr.PowSolveMs = &PowSolve{N: len(solves), P50: quantile(solves, 0.5), P90: quantile(solves, 0.9), Bits: w.Challenge}
	}
	wr.Sold = r.bought.Load()
	fa := &wr.Fairness
	fa.N = len(arrival)
	if fa.PostN = len(postArrival); fa.PostN >= 10 {
		if rho := spearman(postArrival, postPosition); !math.IsNaN(rho) {
			fa.PostSpearman = rho
		}
	}
	if fa.N < 100 {
		fa.Err = fmt.Sprintf("only %d pre-queue shoppers saw a position after the opening: too few for the test (100 at least)", fa.N)
		return
	}
	fa.Spearman = spearman(arrival, position)
	fa.Table = decileTable(arrival, position)
	fa.ChiSq, fa.DF = chiSquare(tableRows(fa.Table))
	fa.P = chiSquareP(fa.ChiSq, fa.DF)
	if math.IsNaN(fa.Spearman) || math.IsNaN(fa.P) {
		// JSON has no NaN: a degenerate sample (every position alike)
		// is said in words.
		*fa = Fairness{N: fa.N, Table: fa.Table, Err: "every pre-queue shopper saw the same position: no ranks to compare"}
	}
}

// sampleAt is the reading nearest to t (seconds after the opening),
// within a second.
func sampleAt(ss []AdmitSample, t float64) (AdmitSample, bool) {
	best, ok := AdmitSample{}, false
	for _, s := range ss {
		if math.Abs(s.T-t) <= 1 && (!ok || math.Abs(s.T-t) < math.Abs(best.T-t)) {
			best, ok = s, true
		}
	}
	return best, ok
}

// front is the highest position that edge e's shoppers saw admitted by
// t seconds after the opening.
func (r *wrRun) front(e int, t float64) int64 {
	var m int64
	for i := range r.shoppers {
		s := &r.shoppers[i]
		if s.edge == e && !s.admittedAt.IsZero() && s.admittedAt.Sub(r.opens).Seconds() <= t {
			m = max(m, s.admittedPos)
		}
	}
	return m
}

// checkLottery reads the published key and the ranked list and checks
// that the key is the one committed to and that it reproduces the order:
// pre-queue tickets ranked by HMAC-SHA256(key, ticketId), ascending.
func (r *wrRun) checkLottery() Lottery {
	var l Lottery
	c := &http.Client{Timeout: 30 * time.Second}
	var pub struct {
		Commit  string `json:"commit"`
		Key     string `json:"key"`
		Members int    `json:"members"`
	}
	if err := getJSON(c, "http://"+r.addrs[0]+"/api/seckill/queue/lottery?productId="+r.product, &pub); err != nil {
		l.Err = err.Error()
		return l
	}
	l.Commit, l.Key, l.Members = pub.Commit, pub.Key, pub.Members
	var list struct {
		Ranking []string `json:"ranking"`
	}
	if err := getJSON(c, "http://"+r.admins[0]+"/admin/waitroom/lottery?productId="+r.product, &list); err != nil {
		l.Err = err.Error()
		return l
	}
	l.Listed = len(list.Ranking)
	key := lotteryKey(pub.Key)
	sum := sha256.Sum256(key)
	l.CommitOK = pub.Key != "" && hex.EncodeToString(sum[:]) == strings.ToLower(pub.Commit)
	type ranked struct {
		id  string
		mac []byte
	}
	rs := make([]ranked, len(list.Ranking))
	for i, id := range list.Ranking {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(id))
		rs[i] = ranked{id, m.Sum(nil)}
	}
	sort.SliceStable(rs, func(a, b int) bool { return string(rs[a].mac) < string(rs[b].mac) })
	l.OrderOK = len(rs) > 0 && len(rs) == pub.Members
	rank := map[string]int64{}
	for i := range rs {
		if rs[i].id != list.Ranking[i] {
			l.OrderOK = false
		}
		rank[rs[i].id] = int64(i + 1)
	}
	for i := range r.shoppers {
		s := &r.shoppers[i]
		if !s.inPrequeue() || s.ticketID == "" || s.position == 0 {
			continue
		}
		if rank[s.ticketID] == s.position {
			l.PositionsOK++
		} else {
			l.PositionsBad++
		}
	}
	l.Reproduced = l.CommitOK && l.OrderOK && l.PositionsBad == 0
	return l
}

// ticketID is the id inside a ticket (base64url of version | 8-byte id |
// place | expiry | tag), as hex: its form in the published lottery; "" if
// it is not one.
func ticketID(t string) string {
	b, err := base64.RawURLEncoding.DecodeString(t)
	if err != nil || len(b) < 9 {
		return ""
	}
	return hex.EncodeToString(b[1:9])
}

// lotteryKey is the key's bytes: the published key is hex.
func lotteryKey(s string) []byte {
	if b, err := hex.DecodeString(s); err == nil {
		return b
	}
	return []byte(s)
}

func getJSON(c *http.Client, url string, v any) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %v", url, err)
	}
	return nil
}
