package consumer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"flashgate/internal/await"
)

func TestStallClock(t *testing.T) {
	t0 := time.Unix(1000, 0)
	after := 10 * time.Second
	var c stallClock
	at := func(d time.Duration, parts ...partitionLag) []int {
		t.Helper()
		stalled, _ := c.observe(t0.Add(d), parts, after)
		ids := []int{}
		for _, p := range stalled {
			ids = append(ids, p.Partition)
		}
		return ids
	}
	p := func(id int, committed, end int64) partitionLag {
		return partitionLag{Partition: id, Committed: committed, End: end, Lag: end - committed}
	}
	steps := []struct {
		at    time.Duration
		parts []partitionLag
		want  []int
	}{
		{0, []partitionLag{p(0, 5, 9), p(1, 3, 3), p(2, 7, 8)}, []int{}},
		{9 * time.Second, []partitionLag{p(0, 5, 12), p(1, 3, 3), p(2, 8, 8)}, []int{}},
		// 0 stood at 5 with lag for 10s; 1 has none; 2 caught up, then
		// stands with new lag only from now.
		{10 * time.Second, []partitionLag{p(0, 5, 12), p(1, 3, 3), p(2, 8, 9)}, []int{0}},
		{19 * time.Second, []partitionLag{p(0, 5, 12), p(1, 3, 3), p(2, 8, 9)}, []int{0}},
		{20 * time.Second, []partitionLag{p(0, 5, 12), p(1, 3, 3), p(2, 8, 9)}, []int{0, 2}},
		// A commit restarts the clock.
		{21 * time.Second, []partitionLag{p(0, 6, 12), p(1, 3, 3), p(2, 8, 9)}, []int{2}},
	}
	for _, s := range steps {
		if got := at(s.at, s.parts...); !slices.Equal(got, s.want) {
			t.Fatalf("at %v: stalled %v, want %v", s.at, got, s.want)
		}
	}
	c.reset()
	if got := at(40*time.Second, p(0, 6, 12), p(2, 8, 9)); len(got) != 0 {
		t.Fatalf("after reset: stalled %v, want none", got)
	}
}

// TestWatchStalls: a stalled partition makes the watch ask for a rejoin
// only while the group is Stable (a rebalance under way drops the member
// anyway), and never while this consumer's inserts fail (the store is
// down: the whole group stalls, and a rebalance would not help).
func TestWatchStalls(t *testing.T) {
	stalled := []partitionLag{{Partition: 0, Committed: 3, End: 9, Lag: 6}, {Partition: 1, Committed: 4, End: 4}}
	watch := func(t *testing.T, c *Consumer) {
		c.cfg.StallAfter, c.cfg.stallCheck = 50*time.Millisecond, 5*time.Millisecond
		c.cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.watchStalls(ctx)
		}()
		t.Cleanup(func() { cancel(); <-done })
	}
	t.Run("rebalancing", func(t *testing.T) {
		var state atomic.Value
		state.Store("PreparingRebalance")
		var asked atomic.Int64
		c := &Consumer{}
		c.cfg.partitionLags = func(context.Context, *Consumer) ([]partitionLag, error) { return stalled, nil }
		c.cfg.groupState = func(context.Context, *Consumer) (string, error) {
			asked.Add(1)
			return state.Load().(string), nil
		}
		watch(t, c)
		// Every call is a stall seen and the state consulted.
		await.Until(t, 5*time.Second, "the watch seeing the stall 5 times", func() bool { return asked.Load() >= 5 })
		if c.rejoin.Load() {
			t.Fatal("asked for a rejoin while the group was rebalancing")
		}
		state.Store("Stable")
		await.Until(t, 5*time.Second, "a rejoin asked for once the group is Stable", c.rejoin.Load)
	})
	t.Run("store down", func(t *testing.T) {
		var outage atomic.Bool
		outage.Store(true)
		var reads atomic.Int64
		c := &Consumer{}
		c.cfg.partitionLags = func(context.Context, *Consumer) ([]partitionLag, error) {
			if reads.Add(1); outage.Load() {
				c.insertErrs.Add(1) // as Run's inserts would meanwhile
			}
			return stalled, nil
		}
		c.cfg.groupState = func(context.Context, *Consumer) (string, error) { return "Stable", nil }
		watch(t, c)
		// 20 readings span > 2x StallAfter (a tick after each reading
		// sees the failed insert and skips).
		await.Until(t, 5*time.Second, "20 readings during the outage", func() bool { return reads.Load() >= 20 })
		if c.rejoin.Load() {
			t.Fatal("asked for a rejoin while the inserts failed")
		}
		t0 := time.Now()
		outage.Store(false)
		await.Until(t, 5*time.Second, "a rejoin asked for after the outage", c.rejoin.Load)
		if d := time.Since(t0); d < 50*time.Millisecond {
			t.Fatalf("rejoin asked for %v after the outage: the stall clock did not restart at it", d)
		}
	})
}

// ghostMember is a member of the group that no consumer speaks for: it
// joins first (so it leads), gives itself half the partitions when the
// consumer joins, then only heartbeats, so its session never lapses, and
// never rejoins a rebalance. A rebalance that completes drops it.
//
// It stands for the member kfake keeps of a consumer killed while its
// JoinGroup was parked (stall.go), which cannot be made on purpose: whether
// kfake delivers the join's answer to the closed connection — and so starts
// the member's session — is a select between a buffered channel and a
// closed one (client_conn.go, clientReq.reply). A client that heartbeats
// while it no longer consumes holds its partitions the same way on real
// Kafka, until a rebalance.
type ghostMember struct {
	cl     *kgo.Client
	group  string
	topic  string
	id     string
	gen    int32
	phase  atomic.Int32 // 1: leads alone; 2: assigned half to the consumer
	parts  int32
	cancel context.CancelFunc
	done   chan struct{}
}

func (g *ghostMember) join(ctx context.Context) (*kmsg.JoinGroupResponse, error) {
	for {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = g.group, g.id, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 6000, 3000
		meta := kmsg.ConsumerMemberMetadata{Topics: []string{g.topic}}
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: meta.AppendTo(nil)}}
		resp, err := req.RequestWith(ctx, g.cl)
		if err != nil {
			return nil, err
		}
		if resp.ErrorCode == kerr.MemberIDRequired.Code {
			g.id = resp.MemberID
			continue
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return nil, err
		}
		return resp, nil
	}
}

// lead joins and assigns: the ghost partitions [0, keep), every other
// member the rest.
func (g *ghostMember) lead(ctx context.Context, keep int32) error {
	resp, err := g.join(ctx)
	if err != nil {
		return err
	}
	if resp.LeaderID != g.id {
		return kerr.ErrorForCode(kerr.InconsistentGroupProtocol.Code) // not expected: it joined first
	}
	g.gen = resp.Generation
	assign := func(parts []int32) []byte {
		a := kmsg.ConsumerMemberAssignment{Topics: []kmsg.ConsumerMemberAssignmentTopic{{Topic: g.topic, Partitions: parts}}, UserData: []byte{}}
		return a.AppendTo(nil)
	}
	var mine, rest []int32
	for p := range g.parts {
		if p < keep {
			mine = append(mine, p)
		} else {
			rest = append(rest, p)
		}
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.MemberID, sync.Generation = g.group, g.id, g.gen
	for _, m := range resp.Members {
		parts := rest
		if m.MemberID == g.id {
			parts = mine
		}
		sync.GroupAssignment = append(sync.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: m.MemberID, MemberAssignment: assign(parts)})
	}
	sresp, err := sync.RequestWith(ctx, g.cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(sresp.ErrorCode)
}

// startGhost makes the ghost the group's only member and leader; it then
// heartbeats, and the first rebalance (the consumer joining) it rejoins
// to keep half the partitions; later ones it ignores.
func startGhost(t *testing.T, brokers []string, group, topic string, parts int32) *ghostMember {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &ghostMember{cl: cl, group: group, topic: topic, parts: parts, cancel: cancel, done: make(chan struct{})}
	if err := g.lead(ctx, parts); err != nil {
		t.Fatalf("ghost member: %v", err)
	}
	g.phase.Store(1)
	go func() {
		defer close(g.done)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			hb := kmsg.NewPtrHeartbeatRequest()
			hb.Group, hb.MemberID, hb.Generation = g.group, g.id, g.gen
			resp, err := hb.RequestWith(ctx, g.cl)
			if err != nil || resp.ErrorCode != kerr.RebalanceInProgress.Code || g.phase.Load() != 1 {
				continue
			}
			if err := g.lead(ctx, parts/2); err != nil {
				t.Errorf("ghost member: rejoining: %v", err)
				return
			}
			g.phase.Store(2)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-g.done
		cl.Close()
	})
	return g
}

// TestConsumerRejoinsPastStalledMember: a member of the group holds half
// the partitions and never consumes them (ghostMember). The consumer sees
// their lag stand still for StallAfter, leaves and rejoins the group; the
// rebalance drops the member that does not rejoin, and every event is
// stored. Without the stall watch (StallAfter < 0) half the events stay
// unstored for as long as the member heartbeats.
func TestConsumerRejoinsPastStalledMember(t *testing.T) {
	brokers, _ := startKafka(t)
	st := openStock(t)
	s := openCH(t, ch.Addr())
	g := startGhost(t, brokers, ordersConf.Group, testTopic, 4)
	c := start(t, Config{Brokers: brokers, Store: s, Stock: st, SessionTimeout: 6 * time.Second,
		// Past the group's rebalance timeout (3s), as the default is:
		// the rebalance a rejoin starts does not look stalled.
		StallAfter: 4 * time.Second, stallCheck: 100 * time.Millisecond})
	awaitState(t, 20*time.Second, "the ghost member assigning the consumer half the partitions", func() (bool, string) {
		return g.phase.Load() == 2, "not yet"
	})
	evs := sell(t, st, map[string]int64{"gh": 400})
	w := newWriter(brokers, testTopic)
	defer w.Close()
	publish(t, w, evs)
	t0 := time.Now()
	awaitState(t, 30*time.Second, "every event stored", func() (bool, string) {
		n, err := storedRows(s, []string{"gh"})
		return err == nil && n == int64(len(evs)), fmt.Sprintf("%d of %d stored (%v), %v after the publish", n, len(evs), err, time.Since(t0).Round(time.Millisecond))
	})
	t.Logf("all %d stored %v after the publish; stats %+v", len(evs), time.Since(t0).Round(time.Millisecond), c.Stats())
	if c.Stats().Rejoins == 0 {
		t.Fatalf("stored everything without a rejoin: the ghost member held no partition")
	}
}
