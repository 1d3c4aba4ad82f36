package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/segmentio/kafka-go"

	"flashgate/orders/broker"
	"flashgate/orders/order"
	"flashgate/orders/orderstore"
)

// The uncommitted tail: what a ledger rebuild counts as "on the way"
// instead of waiting for the group to drain (orderstore.Ledger.Tail).
//
// Waiting for the drain ties a fenced sale's reopening to the group's
// health: a consumer killed in the window holds its partitions until its
// session (10 s) lapses and the group rebalances, and the sale stayed
// closed 8–30 s (nemesis edge_stuck/reopen_slow, bench/README finding 3).
// Every event Kafka acknowledged is either below its partition's
// committed offset — the consumer commits only after the store, so it is
// stored — or between the committed offset and the end offset: the tail,
// which anyone can read without being a member of the group.

// tailFetchBytes bounds one fetch's answer (a broker answers at least one
// record batch, however large: a fetch always makes progress). A variable
// for TestTail, which makes it small to read a span in many fetches.
var tailFetchBytes int64 = 4 << 20

// Tail returns the events of productID that group has not committed on
// topic: for each partition, from the committed offset (the log start when
// none) up to the end offset read at the call's start. Events published
// after that are not included, and events below the committed offsets are
// stored (or dead-lettered). It decodes as the consumer does and skips
// what the consumer would dead-letter (it is never stored either). It
// connects as sec; an unreachable broker is an error, never a short tail.
func Tail(ctx context.Context, brokers []string, sec broker.Security, topic, group, productID string) ([]order.Event, error) {
	cl, done := sec.Client(brokers, 10*time.Second)
	defer done()
	return readTail(ctx, cl, topic, group, productID)
}

// Tail is Tail for this consumer's topic and group.
func (c *Consumer) Tail(ctx context.Context, productID string) ([]order.Event, error) {
	return readTail(ctx, c.client, c.cfg.Topic, c.cfg.Group, productID)
}

func readTail(ctx context.Context, cl *kafka.Client, topic, group, productID string) ([]order.Event, error) {
	spans, err := uncommitted(ctx, cl, topic, group)
	if err != nil {
		return nil, err
	}
	var out []order.Event
	for _, s := range spans {
		if out, err = readSpan(ctx, cl, topic, s, productID, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readSpan appends the product's events of one partition's span to out.
func readSpan(ctx context.Context, cl *kafka.Client, topic string, s span, productID string, out []order.Event) ([]order.Event, error) {
	for next := s.from; next < s.end; {
		res, err := cl.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: s.partition, Offset: next,
			MinBytes: 1, MaxBytes: tailFetchBytes, MaxWait: 500 * time.Millisecond})
		if err == nil {
			err = res.Error
		}
		if err != nil {
			return nil, fmt.Errorf("consumer: tail: partition %d at %d: %w", s.partition, next, err)
		}
		at := next
		for {
			rec, err := res.Records.ReadRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("consumer: tail: partition %d at %d: %w", s.partition, next, err)
			}
			// A batch may start before the offset asked for.
			if rec.Offset < next || rec.Offset >= s.end {
				continue
			}
			next = rec.Offset + 1
			if rec.Value == nil {
				continue
			}
			b, err := kafka.ReadAll(rec.Value)
			if err != nil {
				return nil, fmt.Errorf("consumer: tail: partition %d at %d: %w", s.partition, rec.Offset, err)
			}
			ev, err := order.Decode(b)
			if err == nil {
				row := orderstore.FromEvent(&ev)
				err = row.Validate()
			}
			if err != nil || ev.ProductID != productID {
				continue // dead-lettered by the consumer (process), or another product's
			}
			out = append(out, ev)
		}
		if next == at {
			// Below the end offset read before, yet nothing there: the
			// log moved (truncated, or a leader lost what it had). Never
			// guess what the tail held.
			return nil, fmt.Errorf("consumer: tail: partition %d: nothing at offset %d (end %d)", s.partition, next, s.end)
		}
	}
	return out, nil
}
