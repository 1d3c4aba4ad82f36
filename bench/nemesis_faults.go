package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"flashgate/orders/stock"
)

// The nemesis: faults drawn at random from the schedule's seed — kind,
// target, when, for how long — and injected into the running fleet, each
// healed after its drawn duration. Faults on different components
// overlap freely; two on the same component (the Redis cluster, the
// brokers, one edge, ClickHouse) are put one after the other.

// The fault kinds, most valuable first.
const (
	fEdgeKill     = "edge-kill"      // kill -9 an edge, start it again
	fEdgePause    = "edge-pause"     // SIGSTOP an edge, SIGCONT
	fRedisKill    = "redis-kill"     // kill -9 a master (its replica in sync), promotion, the old one back as a replica
	fRedisLagKill = "redis-lag-kill" // the same onto a replica that lags (redistest.LagFailover)
	fRedisPause   = "redis-pause"    // SIGSTOP a master past the node timeout: promoted replica, old master demoted on resume
	fRedisStale   = "redis-snapshot" // SAVE on a master, later kill -9 it and restart it from that dump (its replica held back): the shard goes back in time
	fBrokerOne    = "broker-one"     // one broker gone (its connections closed), back
	fBrokerAll    = "broker-all"     // every broker gone (the kfake process SIGSTOPped), back
	fClickHouse   = "clickhouse-kill"
	fConsumerKill = "consumer-kill"  // kill -9 an edge running the consumer while orders flow
	fReload       = "reload"         // POST /admin/reload on an edge, during another fault
	fLinkSlow     = "edge-link-slow" // one edge's link to every Redis node delayed (its delay proxies)
	fLinkCut      = "edge-link-cut"  // one edge's link to every Redis node black-holed: nothing passes, connections stay open
	fEdgeClock    = "edge-clock"     // one edge restarted with its clock 2 s ahead or behind (-test-clock-offset), then back
)

// The link faults' delay each way (plus a uniform jitter): a round trip
// of 120-320 ms against the edge's 200 ms Redis budget.
const (
	linkLatency = 60 * time.Millisecond
	linkJitter  = 100 * time.Millisecond
	clockSkew   = 2 * time.Second
)

// staleDown is how long a master restarted from its snapshot stays down:
// less than the node timeout (2 s), so the rest of the cluster serves on.
const staleDown = time.Second

// laterKinds are the kinds added after the first schedules were found
// (drawn from a stream of their own: drawFaults).
var laterKinds = []string{fRedisStale, fLinkSlow, fLinkCut, fEdgeClock}

// faultKinds are the kinds drawn, with their weights and durations.
var faultKinds = []struct {
	kind     string
	weight   int
	min, max time.Duration // how long it lasts before it heals
	group    string        // faults of one group never overlap ("edge" is per edge)
}{
	{fEdgeKill, 14, 2 * time.Second, 6 * time.Second, "edge"},
	{fRedisKill, 12, 6 * time.Second, 9 * time.Second, "redis"},
	{fBrokerOne, 8, 3 * time.Second, 6 * time.Second, "kafka"},
	{fBrokerAll, 8, 2 * time.Second, 5 * time.Second, "kafka"},
	{fConsumerKill, 10, 2 * time.Second, 6 * time.Second, "edge"},
	{fClickHouse, 8, 3 * time.Second, 7 * time.Second, "clickhouse"},
	{fEdgePause, 8, 1 * time.Second, 4 * time.Second, "edge"},
	{fRedisPause, 8, 4 * time.Second, 7 * time.Second, "redis"},
	{fRedisLagKill, 5, 6 * time.Second, 9 * time.Second, "redis"},
	{fRedisStale, 8, 3 * time.Second, 8 * time.Second, "redis"},
	{fReload, 6, 0, 0, ""},
	{fLinkSlow, 6, 2 * time.Second, 6 * time.Second, "edge"},
	{fLinkCut, 6, 2 * time.Second, 5 * time.Second, "edge"},
	{fEdgeClock, 6, 5 * time.Second, 10 * time.Second, "edge"},
}

// plannedFault is one fault of a schedule, drawn before it runs.
type plannedFault struct {
	Kind   string
	Target int // the edge (0-based) or the product whose master; the broker node
	At     time.Duration
	For    time.Duration
	Skew   time.Duration // edge-clock: the offset, +2 s or -2 s
	group  string
}

func (f plannedFault) String() string {
	if f.Skew != 0 {
		return fmt.Sprintf("%5.1fs +%.1fs %s %s %+.0fs", f.At.Seconds(), f.For.Seconds(), f.Kind, f.targetName(), f.Skew.Seconds())
	}
	return fmt.Sprintf("%5.1fs +%.1fs %s %s", f.At.Seconds(), f.For.Seconds(), f.Kind, f.targetName())
}

func (f plannedFault) targetName() string {
	switch f.Kind {
	case fEdgeKill, fEdgePause, fConsumerKill, fReload, fLinkSlow, fLinkCut, fEdgeClock:
		return fmt.Sprintf("edge%d", f.Target+1)
	case fRedisKill, fRedisLagKill, fRedisPause, fRedisStale:
		return "master of " + productID(f.Target)
	case fBrokerOne:
		return fmt.Sprintf("broker %d", f.Target)
	case fBrokerAll:
		return "all brokers"
	}
	return "clickhouse"
}

// drawFaults draws n faults over a load of length d from seed: every
// fault starts after 2 s and heals before the last 10 s (the schedule's
// quiet tail, where every sale must reopen). kinds, if not empty, limits
// the kinds drawn. The kinds added later (laterKinds: the snapshot, the
// link and the clock) are drawn apart, from a stream of their own, (n+1)/2
// of them, and fitted around the first kinds' faults: a seed's faults of
// the first kinds are the ones it drew before they existed, so the seeds
// found and fixed earlier replay as they did.
func drawFaults(seed int64, n int, d time.Duration, edges, consumers, products, brokers int, kinds []string) []plannedFault {
	first, last := 2*time.Second, d-10*time.Second
	if last <= first {
		return nil
	}
	allowed := func(later bool) func(string) bool {
		return func(k string) bool {
			return contains(laterKinds, k) == later && (len(kinds) == 0 || contains(kinds, k))
		}
	}
	t := drawTargets{edges, consumers, products, brokers}
	kept := drawSome(rand.New(rand.NewPCG(uint64(seed), 0x6e656d65736973)), n, first, last, allowed(false), t)
	later := drawSome(rand.New(rand.NewPCG(uint64(seed), 0x6e656d6c61746572)), (n+1)/2, first, last, allowed(true), t)
	// Fitted into the gaps their groups leave (heal and settle: 2 s).
	busy := map[string][][2]time.Duration{}
	for _, f := range kept {
		if f.group != "" {
			busy[f.group] = append(busy[f.group], [2]time.Duration{f.At, f.At + f.For + 2*time.Second})
		}
	}
	for _, f := range later {
		for moved := true; moved; {
			moved = false
			for _, iv := range busy[f.group] {
				if f.At < iv[1] && f.At+f.For+2*time.Second > iv[0] {
					f.At, moved = iv[1], true
				}
			}
		}
		if f.At+f.For > last {
			continue
		}
		busy[f.group] = append(busy[f.group], [2]time.Duration{f.At, f.At + f.For + 2*time.Second})
		kept = append(kept, f)
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].At < kept[j].At })
	return kept
}

// drawTargets are the fleet's counts a target is drawn from.
type drawTargets struct{ edges, consumers, products, brokers int }

// drawSome draws n faults of the kinds allowed from rnd: one at a time
// per group (a later one waits for the earlier to heal, and a second
// more, or is dropped past the quiet tail), a reload in the middle of
// another fault.
func drawSome(rnd *rand.Rand, n int, first, last time.Duration, allowed func(string) bool, t drawTargets) []plannedFault {
	total := 0
	for _, k := range faultKinds {
		if allowed(k.kind) {
			total += k.weight
		}
	}
	if total == 0 {
		return nil
	}
	var out, reloads []plannedFault
	for range n {
		w := rnd.IntN(total)
		var f plannedFault
		for _, k := range faultKinds {
			if !allowed(k.kind) {
				continue
			}
			if w < k.weight {
				f = plannedFault{Kind: k.kind, group: k.group, For: k.min}
				if k.max > k.min {
					f.For += time.Duration(rnd.Int64N(int64(k.max - k.min)))
				}
				break
			}
			w -= k.weight
		}
		f.For = f.For.Round(100 * time.Millisecond)
		f.At = (first + time.Duration(rnd.Int64N(int64(last-first)))).Round(100 * time.Millisecond)
		switch f.Kind {
		case fEdgeKill, fEdgePause, fReload, fLinkSlow, fLinkCut:
			f.Target = rnd.IntN(t.edges)
		case fEdgeClock:
			f.Target = rnd.IntN(t.edges)
			f.Skew = clockSkew
			if rnd.IntN(2) == 0 {
				f.Skew = -clockSkew
			}
		case fConsumerKill:
			f.Target = rnd.IntN(max(1, t.consumers))
		case fRedisKill, fRedisLagKill, fRedisPause, fRedisStale:
			f.Target = rnd.IntN(t.products)
		case fBrokerOne:
			f.Target = rnd.IntN(t.brokers)
		case fClickHouse:
			// The shard, with -clickhouse cluster: from the time, not
			// the stream, which stays as it was before clusters.
			f.Target = int(f.At/(100*time.Millisecond)) % 2
		}
		if f.group == "edge" {
			f.group = fmt.Sprintf("edge%d", f.Target)
		}
		if f.Kind == fReload {
			reloads = append(reloads, f)
			continue
		}
		out = append(out, f)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	busy := map[string]time.Duration{}
	var kept []plannedFault
	for _, f := range out {
		if until, ok := busy[f.group]; ok && f.At < until {
			f.At = until
		}
		if f.At+f.For > last {
			continue
		}
		busy[f.group] = f.At + f.For + 2*time.Second // heal and settle
		kept = append(kept, f)
	}
	for _, r := range reloads {
		if len(kept) > 0 {
			o := kept[rnd.IntN(len(kept))]
			r.At = (o.At + o.For/2).Round(100 * time.Millisecond)
		}
		kept = append(kept, r)
	}
	return kept
}

// nemesis injects a schedule's faults into its fleet.
type nemesis struct {
	env     *Env
	cluster interface {
		MasterOf(string) string
		ReplicaOf(string) string
		Kill(string)
		Pause(string)
		Resume(string)
		Revive(string)
		AwaitMaster(string, string, time.Duration) string
		LagFailover(string, time.Duration) string
		Settled(time.Duration) error
		Save(string)
		RestartFromSave(string, time.Duration) string
	}
	set       *EdgeSet
	gomaxproc int
	start     time.Time
	log       func(format string, args ...any)

	links map[int][]*DelayProxy // an edge's proxies to every Redis node (the link faults' targets)

	edgeMu []sync.Mutex // one fault at a time per edge (run)

	mu       sync.Mutex
	edgeDown []bool // edges killed and not yet back
	restarts int
	events   []FaultEvent
}

func (n *nemesis) ms() int64 { return time.Since(n.start).Milliseconds() }

// alive reports whether edge i runs (for the calls after the run).
func (n *nemesis) alive(i int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return !n.edgeDown[i]
}

// run injects every fault at its time and heals it; it returns once all
// healed (or ctx ended).
func (n *nemesis) run(ctx context.Context, plan []plannedFault) []FaultEvent {
	var wg sync.WaitGroup
	for _, f := range plan {
		wg.Go(func() {
			if !pause(ctx, time.Until(n.start.Add(f.At))) {
				return
			}
			// One fault at a time on an edge: a restart that outlasts
			// its planned heal delays the next fault on that edge
			// (its event has the time it really started).
			if f.group != "" && strings.HasPrefix(f.group, "edge") {
				mu := &n.edgeMu[f.Target]
				mu.Lock()
				defer mu.Unlock()
			}
			ev := n.inject(ctx, f)
			n.mu.Lock()
			n.events = append(n.events, ev)
			n.mu.Unlock()
		})
	}
	wg.Wait()
	sort.SliceStable(n.events, func(i, j int) bool { return n.events[i].AtMs < n.events[j].AtMs })
	return n.events
}

// inject is one fault, from injection to healed.
func (n *nemesis) inject(ctx context.Context, f plannedFault) (ev FaultEvent) {
	ev = FaultEvent{Kind: f.Kind, Target: f.targetName(), AtMs: n.ms()}
	defer func() {
		if r := recover(); r != nil { // a cluster kit method failing outside a test panics
			ev.Err = fmt.Sprint(r)
		}
		if ev.Err != "" {
			n.log("nemesis: %s %s: %s", f.Kind, ev.Target, firstLines(ev.Err, 3))
		}
	}()
	heal := func() bool { return pause(ctx, time.Until(n.start.Add(f.At+f.For))) }
	n.log("nemesis: %5.1fs %s %s for %.1fs", float64(ev.AtMs)/1000, f.Kind, ev.Target, f.For.Seconds())
	switch f.Kind {
	case fEdgeKill, fConsumerKill:
		i := f.Target
		n.mu.Lock()
		p := n.set.Procs[i]
		n.edgeDown[i] = true
		n.mu.Unlock()
		syscall.Kill(p.Pid(), syscall.SIGKILL)
		<-p.done
		heal()
		n.mu.Lock()
		n.restarts++
		run := n.restarts
		n.mu.Unlock()
		tries, err := n.startEdge(ctx, i, run)
		if err != nil {
			ev.Err = err.Error()
		} else if tries > 1 {
			ev.Note = fmt.Sprintf("started at the %d. try", tries)
		}
		n.mu.Lock()
		n.edgeDown[i] = err != nil // it stays down when it never started
		n.mu.Unlock()
	case fEdgeClock:
		// Restarted (SIGTERM, drained) with the offset, and at the heal
		// restarted again on the true clock.
		if err := n.restartEdge(ctx, f.Target, "-test-clock-offset", f.Skew.String()); err != nil {
			ev.Err = err.Error()
			return ev
		}
		ev.Note, ev.SkewMs = fmt.Sprintf("clock %+.0fs", f.Skew.Seconds()), f.Skew.Milliseconds()
		heal()
		if err := n.restartEdge(ctx, f.Target); err != nil {
			ev.Err = err.Error()
		}
	case fLinkSlow, fLinkCut:
		proxies := n.links[f.Target]
		if len(proxies) == 0 {
			ev.Err = "no link proxies for this edge"
			return ev
		}
		until := n.start.Add(f.At + f.For)
		for _, d := range proxies {
			if f.Kind == fLinkCut {
				d.Hold(until)
			} else {
				d.SetDelay(linkLatency, linkJitter)
			}
		}
		heal()
		for _, d := range proxies {
			d.SetDelay(0, 0)
		}
	case fEdgePause:
		p := n.set.Procs[f.Target]
		syscall.Kill(p.Pid(), syscall.SIGSTOP)
		heal()
		syscall.Kill(p.Pid(), syscall.SIGCONT)
	case fRedisStale:
		// The snapshot at the fault's start, the crash and the restart
		// from it at its heal: the writes in between are forgotten.
		key := stock.StockKey(productID(f.Target))
		master := n.cluster.MasterOf(key)
		ev.Target += " (" + master + ")"
		n.cluster.Save(master)
		heal()
		replica := n.cluster.RestartFromSave(master, staleDown)
		ev.Note = fmt.Sprintf("restarted from the dump of %.1fs (replica %s held back, %v down)", float64(ev.AtMs)/1000, replica, staleDown)
		if err := n.cluster.Settled(60 * time.Second); err != nil {
			ev.Err = "cluster not settled after the heal: " + err.Error()
		}
	case fRedisKill, fRedisPause, fRedisLagKill:
		key := stock.StockKey(productID(f.Target))
		master := n.cluster.MasterOf(key)
		ev.Target += " (" + master + ")"
		switch f.Kind {
		case fRedisKill:
			n.cluster.Kill(master)
			ev.Note = "promoted " + n.cluster.AwaitMaster(key, master, 30*time.Second)
		case fRedisLagKill:
			ev.Note = "promoted (lagging) " + n.cluster.LagFailover(key, 30*time.Second)
		case fRedisPause:
			n.cluster.Pause(master)
		}
		heal()
		if f.Kind == fRedisPause {
			n.cluster.Resume(master)
		} else {
			n.cluster.Revive(master)
		}
		if err := n.cluster.Settled(60 * time.Second); err != nil {
			ev.Err = "cluster not settled after the heal: " + err.Error()
		}
	case fBrokerOne:
		if err := n.brokerControl("stop", f.Target); err != nil {
			ev.Err = err.Error()
			return ev
		}
		heal()
		if err := n.brokerControl("start", f.Target); err != nil {
			ev.Err = err.Error()
		}
	case fBrokerAll:
		pid := n.env.Kafka.Pid()
		syscall.Kill(pid, syscall.SIGSTOP)
		heal()
		syscall.Kill(pid, syscall.SIGCONT)
	case fClickHouse:
		if c := n.env.chc; c != nil {
			// A cluster: one shard's server (the target drawn).
			i := f.Target % c.Shards()
			ev.Target = fmt.Sprintf("clickhouse shard %d (%s)", i+1, c.Node(i).Addr())
			c.Stop(i)
			heal()
			if err := c.Start(i); err != nil {
				ev.Err = err.Error()
			}
			break
		}
		n.env.ch.Stop()
		heal()
		if err := n.env.ch.Start(); err != nil {
			ev.Err = err.Error()
		}
	case fReload:
		n.mu.Lock()
		down := n.edgeDown[f.Target]
		admin := n.set.Admins[f.Target]
		n.mu.Unlock()
		if down {
			ev.Note = "edge down: no reload"
		} else if st, err := postEmpty("http://" + admin + "/admin/reload"); err != nil || st != 200 {
			ev.Err = fmt.Sprintf("POST /admin/reload: %d %v", st, err)
		}
	}
	ev.HealMs = n.ms()
	return ev
}

// restartEdge stops edge i (SIGTERM: it drains) and starts it again with
// extra arguments, down meanwhile for the shoppers and the checks.
func (n *nemesis) restartEdge(ctx context.Context, i int, extra ...string) error {
	n.mu.Lock()
	p := n.set.Procs[i]
	n.edgeDown[i] = true
	n.restarts++
	run := n.restarts
	n.mu.Unlock()
	p.Stop(5 * time.Second)
	_, err := n.startEdge(ctx, i, run, extra...)
	n.mu.Lock()
	n.edgeDown[i] = err != nil
	n.mu.Unlock()
	return err
}

// startEdge starts edge i again as a supervisor would: an edge that
// exits before it is ready (it refuses to start while a server it needs
// is down) is started again every second, for at most a minute. It
// returns the tries.
func (n *nemesis) startEdge(ctx context.Context, i, run int, extra ...string) (int, error) {
	deadline := time.Now().Add(time.Minute)
	for try := 1; ; try++ {
		err := n.env.RestartEdge(context.WithoutCancel(ctx), n.set, i, n.gomaxproc, productID(0), run*100+try, extra...)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			if err != nil {
				err = fmt.Errorf("not ready after %d tries: %w", try, err)
			}
			return try, err
		}
		n.set.Procs[i].Stop(2 * time.Second) // if it still runs, unready
		n.log("nemesis: edge%d did not start (%s); again in 1 s", i+1, firstLines(err.Error(), 1))
		pause(ctx, time.Second)
	}
}

func (n *nemesis) brokerControl(action string, node int) error {
	st, err := postEmpty(fmt.Sprintf("http://%s/%s?node=%d", n.env.KafkaControl, action, node))
	if err == nil && st != 200 {
		err = fmt.Errorf("kfake control %s node %d: %d", action, node, st)
	}
	return err
}

func postEmpty(u string) (int, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post(u, "application/json", strings.NewReader("{}"))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
