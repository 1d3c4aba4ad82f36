package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// A partition can stay unconsumed while the group looks healthy: its
// owner is a member the coordinator keeps but that no process speaks for.
// kfake (the embedded broker, and the tests') keeps a member that was
// killed while its JoinGroup was parked about half the time: a member new
// in JoinGroup v1/v2 — kafka-go's — has no session timer while its join is
// parked (groups.go: addMemberAndRebalance -> stopPending), group.reply
// starts one only when the answer was handed to the connection
// (creq.reply true -> updateHeartbeat), and for a closed connection
// clientReq.reply (client_conn.go) selects at random between its buffered
// response channel and its closed done channel. The leader assigns the
// member partitions like any other, the group is Stable, no session
// lapses, and those partitions' lag stays for good
// (TestConsumerRejoinsAfterRepeatedKills, 1 run in 15). Real Kafka starts
// every member's session when a join completes, answered or not
// (GroupCoordinator.onCompleteJoin); there, the same stall needs a member
// that heartbeats but neither consumes nor rejoins a rebalance.
//
// The only way out is a rebalance: completing one drops every member that
// did not rejoin. So each consumer watches the group's committed offsets
// and, when a partition with lag has not moved for StallAfter while this
// consumer's own inserts succeed, leaves and rejoins the group, which
// rebalances it — unless the group is rebalancing already (another
// member's watch saw the stall first, or the broker is dropping a dead
// member by itself): that rebalance drops the member too.

// stallClock tracks since when each partition's committed offset has
// stood still with lag behind it.
type stallClock struct {
	since map[int]stallSeen
}

type stallSeen struct {
	committed int64
	since     time.Time
}

// observe records one reading of the partitions at now and returns those
// that have stood still, with lag, for at least after.
func (s *stallClock) observe(now time.Time, parts []partitionLag, after time.Duration) (stalled []partitionLag, longest time.Duration) {
	if s.since == nil {
		s.since = map[int]stallSeen{}
	}
	for _, p := range parts {
		seen, ok := s.since[p.Partition]
		if p.Lag == 0 {
			delete(s.since, p.Partition)
			continue
		}
		if !ok || seen.committed != p.Committed {
			s.since[p.Partition] = stallSeen{committed: p.Committed, since: now}
			continue
		}
		if d := now.Sub(seen.since); d >= after {
			stalled = append(stalled, p)
			longest = max(longest, d)
		}
	}
	return stalled, longest
}

// reset forgets every reading: after a rejoin (the group is new) and
// after a failed insert (the whole group stalls when the store is down,
// and a rebalance would not help).
func (s *stallClock) reset() { clear(s.since) }

// watchStalls reads the group's offsets every stallCheck until ctx ends and
// sets c.rejoin when a partition stalled (see stallClock). Run does the
// rejoin between batches and counts it.
func (c *Consumer) watchStalls(ctx context.Context) {
	t := time.NewTicker(c.cfg.stallCheck)
	defer t.Stop()
	var clock stallClock
	insertErrs, rejoins := c.insertErrs.Load(), c.rejoins.Load()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, r := c.insertErrs.Load(), c.rejoins.Load(); n != insertErrs || r != rejoins || c.rejoin.Load() {
			insertErrs, rejoins = n, r
			clock.reset()
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, c.cfg.stallCheck)
		parts, err := c.cfg.partitionLags(rctx, c)
		cancel()
		if err != nil {
			continue // the next reading tells; a broker away stalls nothing by itself
		}
		stalled, longest := clock.observe(time.Now(), parts, c.cfg.StallAfter)
		if len(stalled) == 0 {
			continue
		}
		rctx, cancel = context.WithTimeout(ctx, c.cfg.stallCheck)
		state, err := c.cfg.groupState(rctx, c)
		cancel()
		if err != nil || state != "Stable" {
			continue // the next reading tells
		}
		var lag int64
		ids := make([]int, 0, len(stalled))
		for _, p := range stalled {
			lag += p.Lag
			ids = append(ids, p.Partition)
		}
		c.cfg.Log.Warn("orders consumer: partitions with lag not consumed by the group, rejoining it to rebalance",
			"partitions", ids, "lag", lag, "stalled_for", longest.Round(time.Millisecond), "stall_after", c.cfg.StallAfter)
		c.rejoin.Store(true)
	}
}

// kafkaGroupState is Config.groupState's default: the coordinator's
// (Stable, PreparingRebalance, CompletingRebalance, Empty, Dead).
func kafkaGroupState(ctx context.Context, c *Consumer) (string, error) {
	resp, err := c.client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{c.cfg.Group}})
	if err != nil {
		return "", err
	}
	if len(resp.Groups) != 1 {
		return "", fmt.Errorf("consumer: describe group %s: %d groups in the answer", c.cfg.Group, len(resp.Groups))
	}
	g := resp.Groups[0]
	if g.Error != nil {
		return "", g.Error
	}
	return g.GroupState, nil
}

// kafkaPartitionLags is Config.partitionLags' default: the brokers'.
func kafkaPartitionLags(ctx context.Context, c *Consumer) ([]partitionLag, error) {
	return partitionLags(ctx, c.client, c.cfg.Topic, c.cfg.Group)
}
