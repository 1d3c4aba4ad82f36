package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"flashgate/orders/broker"
)

// GroupLag is how many messages of topic the group has not committed yet,
// summed over partitions: end offset minus committed offset (minus the log
// start when nothing is committed). The consumer commits only after the
// store, so 0 means every event published before the call is stored (or
// dead-lettered). It asks the brokers, so any process can call it.
// It connects as sec (the zero value: plaintext).
func GroupLag(ctx context.Context, brokers []string, sec broker.Security, topic, group string) (int64, error) {
	cl, done := sec.Client(brokers, 10*time.Second)
	defer done()
	return groupLag(ctx, cl, topic, group)
}

func groupLag(ctx context.Context, cl *kafka.Client, topic, group string) (int64, error) {
	parts, err := partitionLags(ctx, cl, topic, group)
	var lag int64
	for _, p := range parts {
		lag += p.Lag
	}
	return lag, err
}

// partitionLag is one partition of the topic as the group stands on it.
type partitionLag struct {
	Partition int
	// Committed is the group's committed offset, or the log start when
	// nothing (or something older than the log start) is committed.
	Committed int64
	End       int64 // the offset the next event will take
	Lag       int64 // End - Committed, never below 0
}

// partitionLags is the group's lag per partition of topic (none when
// nothing was ever published).
func partitionLags(ctx context.Context, cl *kafka.Client, topic, group string) ([]partitionLag, error) {
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("consumer: lag: metadata: %w", err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil {
		if len(md.Topics) == 1 && errors.Is(md.Topics[0].Error, kafka.UnknownTopicOrPartition) {
			return nil, nil // nothing was ever published
		}
		return nil, fmt.Errorf("consumer: lag: topic %s: %v", topic, md.Topics)
	}
	var parts []int
	var reqs []kafka.OffsetRequest
	for _, p := range md.Topics[0].Partitions {
		parts = append(parts, p.ID)
		reqs = append(reqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
	}
	offs, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("consumer: lag: list offsets: %w", err)
	}
	committed, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if errors.Is(err, kafka.GroupIdNotFound) {
		committed, err = &kafka.OffsetFetchResponse{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("consumer: lag: offset fetch: %w", err)
	}
	if committed.Error != nil && !errors.Is(committed.Error, kafka.GroupIdNotFound) {
		// (A group that never committed is "not found" to some brokers.)
		return nil, fmt.Errorf("consumer: lag: offset fetch: %w", committed.Error)
	}
	done := map[int]int64{}
	for _, p := range committed.Topics[topic] {
		if p.Error != nil && !errors.Is(p.Error, kafka.GroupIdNotFound) {
			return nil, fmt.Errorf("consumer: lag: partition %d: %w", p.Partition, p.Error)
		}
		done[p.Partition] = p.CommittedOffset
	}
	out := make([]partitionLag, 0, len(parts))
	for _, p := range offs.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("consumer: lag: partition %d: %w", p.Partition, p.Error)
		}
		c, ok := done[p.Partition]
		if !ok || c < p.FirstOffset {
			c = p.FirstOffset
		}
		out = append(out, partitionLag{Partition: p.Partition, Committed: c, End: p.LastOffset, Lag: max(0, p.LastOffset-c)})
	}
	return out, nil
}

// span is one partition's messages the group has not committed: the
// offsets from (the committed offset, or the log start when nothing is
// committed or it fell out of retention) up to end, exclusive (the
// partition's end offset when asked).
type span struct {
	partition int
	from, end int64
}

// uncommitted is every partition's span of topic that group has not
// committed yet, as the brokers answer now; partitions with nothing
// uncommitted are left out. A topic that does not exist has none.
func uncommitted(ctx context.Context, cl *kafka.Client, topic, group string) ([]span, error) {
	parts, err := partitionLags(ctx, cl, topic, group)
	if err != nil {
		return nil, err
	}
	var spans []span
	for _, p := range parts {
		if p.Lag > 0 {
			spans = append(spans, span{partition: p.Partition, from: p.Committed, end: p.End})
		}
	}
	return spans, nil
}

// WaitDrained polls GroupLag every poll (default 100ms) until it is 0 or
// ctx ends; the error then says how much was left.
// It connects as sec.
func WaitDrained(ctx context.Context, brokers []string, sec broker.Security, topic, group string, poll time.Duration) error {
	cl, done := sec.Client(brokers, 10*time.Second)
	defer done()
	return waitDrained(ctx, cl, topic, group, poll)
}

func waitDrained(ctx context.Context, cl *kafka.Client, topic, group string, poll time.Duration) error {
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	for {
		lag, err := groupLag(ctx, cl, topic, group)
		if err == nil && lag == 0 {
			return nil
		}
		if !sleep(ctx, poll) {
			if err != nil {
				return fmt.Errorf("consumer: not drained: %w (%v)", err, ctx.Err())
			}
			return fmt.Errorf("consumer: not drained: %d events of %s not stored by group %s: %w", lag, topic, group, ctx.Err())
		}
	}
}

// Lag is GroupLag for this consumer's topic and group.
func (c *Consumer) Lag(ctx context.Context) (int64, error) {
	return groupLag(ctx, c.client, c.cfg.Topic, c.cfg.Group)
}

// Drained waits until the group has stored everything published so far
// (lag 0), polling every 50ms; bound it with ctx. orderstore.Ledger.Drain
// and reconcile's drain option take it.
func (c *Consumer) Drained(ctx context.Context) error {
	return waitDrained(ctx, c.client, c.cfg.Topic, c.cfg.Group, 50*time.Millisecond)
}
