package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf/field"
)

// RouteRoomBench is the routeroom scenario's section: two rooms on two
// routes of the same edges, in front of a loopback origin bench runs
// itself. The "cap" room has only max_active: its visitors stay
// hold_min..hold_max, then check out (the origin ends their session); the
// "rate" room has only admit_per_minute. Each room gets visitors arriving
// evenly over arrive_over; they are apps (Accept: application/json) that
// ask again as the queue page does.
type RouteRoomBench struct {
	Edges          int           `yaml:"edges"`            // edges on the one Redis (default 2)
	Visitors       int           `yaml:"visitors"`         // per room
	ArriveOver     time.Duration `yaml:"arrive_over"`      // the visitors arrive evenly over this long
	MaxActive      int           `yaml:"max_active"`       // the cap room's cap
	HoldMin        time.Duration `yaml:"hold_min"`         // an admitted visitor of the cap room stays this long ...
	HoldMax        time.Duration `yaml:"hold_max"`         // ... at most, then checks out
	AdmitPerMinute int           `yaml:"admit_per_minute"` // the rate room's rate
	Session        time.Duration `yaml:"session"`          // both rooms' session
	PollMin        time.Duration `yaml:"poll_min"`         // a waiting visitor asks every poll_min..poll_max
	PollMax        time.Duration `yaml:"poll_max"`
	Sample         time.Duration `yaml:"sample"` // the rooms' state (GET /admin/rooms) is read this often
	// Challenge is both rooms' proof of work (leading zero bits, 0: none):
	// a new visitor solves it (solvePow, as the page's worker) first.
	Challenge int `yaml:"challenge"`
}

func (sc *Scenario) validateRouteRoom(errs *field.Errors) {
	r := sc.RouteRoom
	if r == nil {
		return
	}
	if r.Edges == 0 {
		r.Edges = 2
	}
	if r.Sample == 0 {
		r.Sample = 200 * time.Millisecond
	}
	if r.Edges < 1 || r.Edges > 8 {
		errs.Add("route_room.edges", "must be 1..8")
	}
	if r.Visitors < 1 || r.Visitors > 20000 {
		errs.Add("route_room.visitors", "must be 1..20000")
	}
	if r.ArriveOver <= 0 || r.ArriveOver >= sc.Duration {
		errs.Add("route_room.arrive_over", "must be > 0 and shorter than duration (the run's bound)")
	}
	if r.MaxActive < 1 {
		errs.Add("route_room.max_active", "must be >= 1")
	}
	if r.HoldMin <= 0 || r.HoldMax < r.HoldMin {
		errs.Add("route_room.hold_min", "want 0 < hold_min <= hold_max")
	}
	if r.AdmitPerMinute < 1 {
		errs.Add("route_room.admit_per_minute", "must be >= 1")
	}
	if r.Session <= r.HoldMax {
		errs.Add("route_room.session", "must be longer than hold_max (the origin ends the cap room's sessions)")
	}
	if r.PollMin <= 0 || r.PollMax < r.PollMin {
		errs.Add("route_room.poll_min", "want 0 < poll_min <= poll_max")
	}
	if r.Challenge < 0 || r.Challenge > 24 {
		errs.Add("route_room.challenge", "must be 0..24 bits (bench solves each one)")
	}
	if sc.WaitingRoom != nil || sc.Fleet != nil || sc.Failover != nil {
		errs.Add("route_room", "not with waiting_room, fleet or failover")
	}
}

// The two rooms.
const (
	rrCap  = "cap"
	rrRate = "rate"
)

// RouteRoomResult is the routeroom scenario's figures.
type RouteRoomResult struct {
	Edges int `json:"edges"`
	// The cap room.
	Cap           int     `json:"max_active"`
	CapVisitors   int     `json:"cap_visitors"`
	CapAdmitted   int     `json:"cap_admitted"`
	OriginMax     int64   `json:"origin_max_concurrent"` // visitors in at once, as the origin counted them
	RedisMax      int64   `json:"redis_max_active"`      // the room's active count, the highest sample
	OvershootPct  float64 `json:"overshoot_pct"`         // (max(origin, redis) − cap) / cap, ≥ 0
	QueuedSamples int     `json:"queued_samples"`        // samples with someone waiting
	// QueuedBelow: of those, with active < cap − 1 %; IdleSeats the mean
	// of cap − active over the queued samples.
	QueuedBelow    int     `json:"queued_below_cap_samples"`
	QueuedBelowPct float64 `json:"queued_below_cap_pct"`
	IdleSeats      float64 `json:"idle_seats_mean"`
	// The same by the origin's count: Redis counts a seat reserved for the
	// next in line and not yet claimed; the origin sees it idle.
	OriginBelowPct float64     `json:"queued_below_cap_origin_pct"`
	OriginIdle     float64     `json:"idle_seats_origin_mean"`
	CapETA         ETAAccuracy `json:"cap_eta"`
	// The rate room.
	Rate         int            `json:"admit_per_minute"`
	RateVisitors int            `json:"rate_visitors"`
	RateAdmitted int            `json:"rate_admitted"`
	RatePerMin   float64        `json:"rate_admitted_per_min"` // over the first to the last admission
	RateMax10s   float64        `json:"rate_max_10s_per_min"`  // the busiest 10 s, per minute
	RateETA      ETAAccuracy    `json:"rate_eta"`
	Outcomes     map[string]int `json:"outcomes"`
	// PowBits and PowSolveP90Ms: the proof of work asked, and what solving
	// it cost bench's visitors (p90 ms of one core).
	PowBits       int     `json:"pow_bits"`
	PowSolveP90Ms float64 `json:"pow_solve_p90_ms"`
	PowRefused    int     `json:"pow_refused"`
}

// rrOrigin is the loopback origin: it counts the cap room's visitors in
// at once (in on /cap/enter, out on /cap/checkout, which ends the session
// with the room's end header) and the times the rate room let one in.
type rrOrigin struct {
	mu       sync.Mutex
	in       map[string]bool
	max      int64
	rateAt   []time.Time
	capCount atomic.Int64
}

func (o *rrOrigin) handle(ctx *fasthttp.RequestCtx) {
	v := string(ctx.Request.Header.Peek("X-Bench-Visitor"))
	ctx.Response.Header.Set("X-Origin", "bench")
	o.mu.Lock()
	switch string(ctx.Path()) {
	case "/cap/enter":
		if !o.in[v] {
			o.in[v] = true
			o.max = max(o.max, int64(len(o.in)))
			o.capCount.Store(int64(len(o.in)))
		}
	case "/cap/checkout":
		// Out before the answer: the room frees the seat only after it.
		delete(o.in, v)
		o.capCount.Store(int64(len(o.in)))
		ctx.Response.Header.Set("Flashgate-Room", "end")
	case "/rate/enter":
		o.rateAt = append(o.rateAt, time.Now())
	}
	o.mu.Unlock()
	ctx.SetBodyString("ok")
}

// rrVisitor is one visitor's journey.
type rrVisitor struct {
	id         string
	room       string
	arrive     time.Time
	admittedAt time.Time
	etas       []etaSeen
	outcome    string
	solveMs    float64 // the proof of work's cost (0: none asked)
	refused    int     // BAD_CHALLENGE answers
}

// rrSample is one read of both rooms' state.
type rrSample struct {
	at              time.Time
	waiting, active int64
	origin          int64 // the cap room's visitors in at once, as the origin counted them
}

// cmdRouteRoom runs the routeroom scenario and prints its report.
func cmdRouteRoom(ctx context.Context, root string, sc *Scenario, f runFlags, stdout, stderr io.Writer) int {
	res, err := runRouteRoom(ctx, root, sc, f, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		if errors.Is(err, context.Canceled) {
			return 130
		}
		return 1
	}
	printRouteRoom(stdout, res)
	return 0
}

func runRouteRoom(ctx context.Context, root string, sc *Scenario, f runFlags, stderr io.Writer) (*Result, error) {
	if f.target != "" || f.pin || f.pprof {
		return nil, errors.New("the routeroom scenario starts its own Redis, origin and edges: no -target, -pin or -pprof")
	}
	rr := sc.RouteRoom
	dir, progress, cleanup, err := runDir(sc.Name, f.keep, f.quiet, stderr)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	env := newEnv(EnvOptions{Root: root, Dir: dir, GoMaxProcs: f.gomaxprocs, InfraCPU: -1, Kafka: "bench",
		Consumer: "edge", ProxyBin: f.proxyBin, ProxyRev: f.proxyRev, Quiet: progress})
	defer env.Close()
	res := runResult(root, sc, f)
	res.Kafka, res.Consumer, res.ClickHouse = "bench", "edge", false
	out := &RouteRoomResult{Edges: rr.Edges, Cap: rr.MaxActive, Rate: rr.AdmitPerMinute, CapVisitors: rr.Visitors,
		RateVisitors: rr.Visitors, Outcomes: map[string]int{}}
	res.RouteRoom = out
	if err := env.build("./cmd/proxy"); err != nil {
		return nil, err
	}
	// The origin, in this process on loopback.
	o := &rrOrigin{in: map[string]bool{}}
	oaddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	osrv := &fasthttp.Server{Handler: o.handle, Name: "bench-room-origin"}
	go osrv.ListenAndServe(oaddr)
	defer osrv.Shutdown()
	fmt.Fprintln(progress, "bench: starting redis-server, kafka, edges; origin", oaddr)
	if err := env.StartRedis(ctx); err != nil {
		return nil, err
	}
	if err := env.StartKafka(ctx); err != nil {
		return nil, err
	}
	room := func(name string, extra map[string]any) map[string]any {
		m := map[string]any{"name": name, "session": rr.Session.String(), "poll": rr.PollMax.String(), "method": "fifo",
			"challenge": map[string]any{"difficulty": rr.Challenge}}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	routes := []any{
		map[string]any{"prefix": "/", "pool": "origin"},
		map[string]any{"prefix": "/cap/", "pool": "origin", "waiting_room": room(rrCap, map[string]any{"max_active": rr.MaxActive})},
		map[string]any{"prefix": "/rate/", "pool": "origin", "waiting_room": room(rrRate, map[string]any{"admit_per_minute": rr.AdmitPerMinute})},
	}
	extra := map[string]any{"upstreams": map[string]any{"routes": routes}}
	for k, v := range sc.Edge {
		extra[k] = v
	}
	now := time.Now()
	// StartEdges waits for a sale's status: one closed sale nobody buys.
	spec := EdgeSpec{RedisAddr: env.RedisAddr, OriginAddr: oaddr, Extra: extra,
		Products: []Activity{{ID: productID(0), Stock: 1, Limit: 1, Price: sc.Price, Start: now, End: now.Add(time.Hour)}}}
	set, err := env.StartEdges(ctx, spec, rr.Edges, false, f.gomaxprocs)
	if err != nil {
		return nil, err
	}
	res.Target = fmt.Sprintf("%d edges started by bench on one standalone redis-server, a loopback origin in bench", rr.Edges)
	fmt.Fprintf(progress, "bench: %d edges %v ready; %d visitors per room over %v\n", rr.Edges, set.Addrs, rr.Visitors, rr.ArriveOver)

	// The visitors: cap room's and rate room's interleaved, request n of a
	// visitor to edge n mod edges (the cookie is every edge's).
	first := time.Now().Add(500 * time.Millisecond)
	vs := make([]rrVisitor, 2*rr.Visitors)
	for i := range vs {
		v := &vs[i]
		v.id, v.room = "v"+strconv.Itoa(i), rrCap
		if i%2 == 1 {
			v.room = rrRate
		}
		v.arrive = first.Add(time.Duration(float64(rr.ArriveOver) * float64(i/2) / float64(rr.Visitors)))
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 512, MaxIdleConns: 2048, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	lctx, stop := context.WithDeadline(ctx, first.Add(sc.Duration))
	defer stop()
	sctx, stopSample := context.WithCancel(ctx)
	var samples map[string][]rrSample
	var originMax atomic.Int64
	sampled := make(chan struct{})
	go func() {
		samples = sampleRooms(sctx, set.Admins[0], rr.Sample, o, &originMax)
		close(sampled)
	}()
	var wg sync.WaitGroup
	for i := range vs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rrJourney(lctx, &vs[i], i, rr, set.Addrs, tr, sc.Timeout)
		}()
	}
	wg.Wait()
	stopSample()
	<-sampled
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	res.Seconds = time.Since(first).Seconds()

	var capWaits, rateWaits []etaWait
	var solves []float64
	out.PowBits = rr.Challenge
	for i := range vs {
		v := &vs[i]
		if v.solveMs > 0 {
			solves = append(solves, v.solveMs)
		}
		out.PowRefused += v.refused
		out.Outcomes[v.room+": "+v.outcome]++
		w := etaWait{admittedAt: v.admittedAt, etas: v.etas}
		if v.room == rrCap {
			capWaits = append(capWaits, w)
			if !v.admittedAt.IsZero() {
				out.CapAdmitted++
			}
		} else {
			rateWaits = append(rateWaits, w)
			if !v.admittedAt.IsZero() {
				out.RateAdmitted++
			}
		}
	}
	out.CapETA, out.RateETA = etaAccuracyOf(capWaits), etaAccuracyOf(rateWaits)
	if len(solves) > 0 {
		sort.Float64s(solves)
		out.PowSolveP90Ms = quantile(solves, 0.9)
	}
	o.mu.Lock()
	out.OriginMax = o.max
	rateAt := append([]time.Time(nil), o.rateAt...)
	o.mu.Unlock()
	below := float64(rr.MaxActive) * 0.99
	var idle, oidle float64
	var obelow int
	for _, s := range samples[rrCap] {
		out.RedisMax = max(out.RedisMax, s.active)
		if s.waiting > 0 {
			out.QueuedSamples++
			idle += float64(int64(rr.MaxActive) - s.active)
			oidle += float64(int64(rr.MaxActive) - s.origin)
			if float64(s.origin) < below {
				obelow++
			}
			if float64(s.active) < below {
				out.QueuedBelow++
			}
		}
	}
	if out.QueuedSamples > 0 {
		out.QueuedBelowPct = 100 * float64(out.QueuedBelow) / float64(out.QueuedSamples)
		out.IdleSeats = idle / float64(out.QueuedSamples)
		out.OriginBelowPct = 100 * float64(obelow) / float64(out.QueuedSamples)
		out.OriginIdle = oidle / float64(out.QueuedSamples)
	}
	out.OvershootPct = math.Max(0, 100*float64(max(out.OriginMax, out.RedisMax)-int64(rr.MaxActive))/float64(rr.MaxActive))
	out.RatePerMin, out.RateMax10s = admissionRate(rateAt, 10*time.Second)
	res.Notes = append(res.Notes, exitNotes(set.Procs...)...)
	env.Close()
	dirOut := outDir(root, f, sc, res.Started)
	if err := res.write(dirOut); err != nil {
		return nil, err
	}
	res.OutDir = dirOut
	return res, nil
}

// rrJourney is one visitor: asks for the room's route until let in, as an
// app does (503 with the place and the estimate, or the origin's answer);
// the cap room's then stays a while and checks out.
func rrJourney(ctx context.Context, v *rrVisitor, idx int, rr *RouteRoomBench, addrs []string, tr *http.Transport, timeout time.Duration) {
	v.outcome = "unfinished"
	if !sleepUntil(ctx, v.arrive) {
		return
	}
	jar, _ := cookiejar.New(nil) // cookies ignore the port: every edge sees them
	c := &http.Client{Jar: jar, Transport: tr, Timeout: timeout}
	rnd := rand.New(rand.NewPCG(uint64(idx), 28))
	n := 0
	var proof [2]string // a solved challenge and its nonce, sent once
	get := func(path string) (int, map[string]any, bool, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addrs[n%len(addrs)]+path, nil)
		if err != nil {
			return 0, nil, false, err
		}
		n++
		req.Header.Set("Accept", "application/json")
		req.Header.Set("X-Bench-Visitor", v.id)
		if proof[0] != "" {
			req.Header.Set("Flashgate-Room-Challenge", proof[0])
			req.Header.Set("Flashgate-Room-Nonce", proof[1])
			proof = [2]string{}
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, false, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if resp.Header.Get("X-Origin") == "" {
			json.Unmarshal(b, &m)
		}
		return resp.StatusCode, m, resp.Header.Get("X-Origin") != "", nil
	}
	for {
		st, m, origin, err := get("/" + v.room + "/enter")
		now := time.Now()
		if err != nil {
			v.outcome = "error"
			return
		}
		if origin && st == 200 {
			v.admittedAt = now
			break
		}
		if m["status"] == "challenge" {
			if m["code"] == "BAD_CHALLENGE" {
				v.refused++
				if v.refused > 3 {
					v.outcome = "proof of work refused"
					return
				}
			}
			c, _ := m["challenge"].(string)
			d, _ := m["difficulty"].(float64)
			t0 := time.Now()
			proof = [2]string{c, solvePow(c, int(d))}
			v.solveMs += float64(time.Since(t0).Microseconds()) / 1000
			continue
		}
		if st != 503 || m["status"] != "waiting" {
			v.outcome = fmt.Sprintf("answer %d %v", st, m["status"])
			return
		}
		eta, _ := m["etaMs"].(float64)
		if eta > 0 {
			v.etas = append(v.etas, etaSeen{at: now, eta: int64(eta)})
		}
		// As the queue page does: every poll_min..poll_max, or when the
		// estimate says the turn comes if that is sooner, or at retryMs if
		// that is sooner.
		wait := rr.PollMin + time.Duration(rnd.Int64N(int64(rr.PollMax-rr.PollMin)+1))
		if eta > 0 {
			wait = min(wait, time.Duration(eta+50)*time.Millisecond)
		}
		if r, ok := m["retryMs"].(float64); ok && r >= 0 {
			wait = min(wait, time.Duration(r)*time.Millisecond) // the edge's advice (held near the head: sooner)
		}
		if !sleepUntil(ctx, now.Add(wait)) {
			return
		}
	}
	if v.room == rrCap {
		hold := rr.HoldMin + time.Duration(rnd.Int64N(int64(rr.HoldMax-rr.HoldMin)+1))
		if !sleepUntil(ctx, time.Now().Add(hold)) {
			return
		}
		if st, _, origin, err := get("/cap/checkout"); err != nil || !origin || st != 200 {
			v.outcome = fmt.Sprintf("checkout %d %v", st, err)
			return
		}
	}
	v.outcome = "admitted"
}

// sampleRooms reads GET /admin/rooms every interval until ctx ends: each
// room's waiting and active from one read of Redis (one script call per
// room), so the two are of the same moment.
func sampleRooms(ctx context.Context, admin string, interval time.Duration, o *rrOrigin, originMax *atomic.Int64) map[string][]rrSample {
	out := map[string][]rrSample{}
	c := &http.Client{Timeout: 2 * time.Second}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		var rooms map[string]struct {
			Waiting int64 `json:"waiting"`
			Active  int64 `json:"active"`
		}
		if err := getJSON(c, "http://"+admin+"/admin/rooms", &rooms); err != nil {
			continue
		}
		now := time.Now()
		for name, r := range rooms {
			out[name] = append(out[name], rrSample{at: now, waiting: r.Waiting, active: r.Active, origin: o.capCount.Load()})
		}
		originMax.Store(max(originMax.Load(), o.capCount.Load()))
	}
}

// admissionRate is the admissions per minute from the first to the last,
// and the most in any window (per minute).
func admissionRate(at []time.Time, window time.Duration) (perMin, maxPerMin float64) {
	if len(at) < 2 {
		return 0, 0
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	span := at[len(at)-1].Sub(at[0])
	if span > 0 {
		perMin = float64(len(at)-1) / span.Minutes()
	}
	if span < window {
		return perMin, perMin
	}
	j, most := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) >= window {
			j++
		}
		most = max(most, i-j+1)
	}
	return perMin, float64(most) / window.Minutes()
}

// printRouteRoom writes the figures; the last line is the RESULT line.
func printRouteRoom(w io.Writer, r *Result) {
	x := r.RouteRoom
	fmt.Fprintf(w, "== %s: %s\n", r.Scenario, r.Target)
	fmt.Fprintf(w, "cap room (max_active %d): %d of %d visitors let in; in at once: origin max %d, Redis max %d (overshoot %.1f %%)\n",
		x.Cap, x.CapAdmitted, x.CapVisitors, x.OriginMax, x.RedisMax, x.OvershootPct)
	fmt.Fprintf(w, "  queued while active < cap − 1 %%: %d of %d samples with someone waiting (%.1f %%); idle seats while queued: %.1f on average\n",
		x.QueuedBelow, x.QueuedSamples, x.QueuedBelowPct, x.IdleSeats)
	fmt.Fprintf(w, "  the same by the origin's count (a reserved seat not yet claimed is idle there): %.1f %%; idle seats %.1f\n",
		x.OriginBelowPct, x.OriginIdle)
	fmt.Fprintf(w, "  ETA error (waits ≥ %.0f s, n=%d): join p50 %.1f %% p90 %.1f %%; half-way p50 %.1f %% p90 %.1f %%\n",
		x.CapETA.MinWaitS, x.CapETA.N, x.CapETA.FirstP50, x.CapETA.FirstP90, x.CapETA.HalfP50, x.CapETA.HalfP90)
	fmt.Fprintf(w, "rate room (admit_per_minute %d): %d of %d let in; %.0f/min first to last, busiest 10 s %.0f/min\n",
		x.Rate, x.RateAdmitted, x.RateVisitors, x.RatePerMin, x.RateMax10s)
	fmt.Fprintf(w, "  ETA error (waits ≥ %.0f s, n=%d): join p50 %.1f %% p90 %.1f %%; half-way p50 %.1f %% p90 %.1f %%\n",
		x.RateETA.MinWaitS, x.RateETA.N, x.RateETA.FirstP50, x.RateETA.FirstP90, x.RateETA.HalfP50, x.RateETA.HalfP90)
	if x.PowBits > 0 {
		fmt.Fprintf(w, "proof of work: %d bits, solved by bench in p90 %.1f ms of one core; %d refused\n", x.PowBits, x.PowSolveP90Ms, x.PowRefused)
	}
	fmt.Fprintf(w, "outcomes: %s\n", countList(x.Outcomes))
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	if r.OutDir != "" {
		fmt.Fprintln(w, "result:", r.OutDir)
	}
	fmt.Fprintf(w, "RESULT scenario=%s edges=%d overshoot_pct=%.1f queued_below_cap_pct=%.1f idle_seats=%.1f cap_eta_join_p90_pct=%.1f cap_eta_half_p90_pct=%.1f rate_eta_join_p90_pct=%.1f rate_eta_half_p90_pct=%.1f admitted_per_min=%.0f admit_per_minute=%d busiest_10s_per_min=%.0f pow_bits=%d pow_solve_p90_ms=%.1f queued_below_cap_origin_pct=%.1f idle_seats_origin=%.1f\n",
		r.Scenario, x.Edges, x.OvershootPct, x.QueuedBelowPct, x.IdleSeats, x.CapETA.FirstP90, x.CapETA.HalfP90,
		x.RateETA.FirstP90, x.RateETA.HalfP90, x.RatePerMin, x.Rate, x.RateMax10s, x.PowBits, x.PowSolveP90Ms, x.OriginBelowPct, x.OriginIdle)
}
