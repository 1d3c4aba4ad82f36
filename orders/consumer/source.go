package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"flashgate/orders/broker"
)

// message is one record of the orders topic as the consumer sees it.
type message struct {
	Topic      string
	Partition  int32
	Offset     int64
	Key, Value []byte
	// Reason is why a dead letter could not be stored.
	Reason string

	// rec is the client's own record, for a client that commits by it
	// (kgo, BenchmarkConsumerCPU's alternative).
	rec any
}

// source is the Kafka client the consumer reads with: a group member
// that commits only when told to.
type source interface {
	// poll appends at most max messages to batch, waiting until there is
	// at least one or ctx ends.
	poll(ctx context.Context, batch []message, max int) ([]message, error)
	// commit commits the offsets of batch, synchronously.
	commit(ctx context.Context, batch []message) error
	// deadLetter writes msgs to the dead-letter topic (acks=all).
	deadLetter(ctx context.Context, msgs []message) error
	// close leaves the group.
	close()
	// fetchWait is how long a message may have waited in the broker
	// before its fetch returned it (0: fetches return at once).
	fetchWait() time.Duration
}

// kafkaGoSource reads with kafka-go's Reader and dead-letters with its
// Writer. BenchmarkConsumerCPU and BenchmarkConsumerLiveCPU run it side by
// side with franz-go's client (kgoSource, in a test file): on a backlog
// kgo took 0.8 of its CPU per order, on a steady stream with fetches that
// return at once 1.36-1.48 times it, with waiting fetches about half (see
// there and bench/README, finding 13); the consumer stays on kafka-go, the
// client of every other produce and consume.
type kafkaGoSource struct {
	r    *kafka.Reader
	dlq  *kafka.Writer
	msgs []kafka.Message // commit's, reused
	wait time.Duration   // the fetches' MaxWait when they wait for waitBytes
}

// waitBytes is how much a fetch waits for, at most the batch time
// (orders.batch_time), when the batch time is at least minWaitingBatch.
// A fetch that returns as soon as anything is written costs a round trip
// (a write, a read and the wake-ups of a connection per partition) per
// producer write: at 5,000 orders/s that was most of the consumer's CPU
// per order (BenchmarkConsumerLiveCPU). An order then waits up to the batch
// time in the broker, but fetch counts that wait in its batch's time, so
// a quiet sale's order is stored no later than before.
const waitBytes = 64 << 10

// minWaitingBatch: under it, fetches return at once (1 byte, 250 ms as
// before). A batch time that short asks for latency, and fetches waiting
// that long would poll idle partitions hundreds of times a second.
const minWaitingBatch = 10 * time.Millisecond

func newKafkaGoSource(c *Consumer) (source, error) {
	if c.cfg.BatchTime < minWaitingBatch {
		return newKafkaGoSourceFetch(c, 1, 250*time.Millisecond)
	}
	return newKafkaGoSourceFetch(c, waitBytes, c.cfg.BatchTime)
}

// newKafkaGoSourceFetch's fetches return as soon as minBytes are there,
// or after maxWait.
func newKafkaGoSourceFetch(c *Consumer, minBytes int, maxWait time.Duration) (source, error) {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:           c.cfg.Brokers,
		GroupID:           c.cfg.Group,
		Topic:             c.cfg.Topic,
		Dialer:            c.cfg.Security.Dialer(),
		QueueCapacity:     c.cfg.BatchSize,
		MinBytes:          minBytes,
		MaxBytes:          10 << 20,
		MaxWait:           maxWait,
		CommitInterval:    0, // CommitMessages is synchronous: offsets move only after the store
		StartOffset:       kafka.FirstOffset,
		HeartbeatInterval: time.Second,
		SessionTimeout:    c.cfg.SessionTimeout,
		RebalanceTimeout:  c.cfg.RebalanceTimeout,
		JoinGroupBackoff:  500 * time.Millisecond,
		ReadBackoffMin:    10 * time.Millisecond,
		ReadBackoffMax:    500 * time.Millisecond,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			c.cfg.Log.Warn("kafka reader: " + fmt.Sprintf(msg, args...))
		}),
		// The group's life (joined as member X in generation N, leader,
		// assignments, leaving) is what explains a group that does not
		// re-form; kafka-go says it only here, a few lines per
		// rebalance. Debug: off unless log.level asks for it. Not its
		// "no messages received … within the allocated time": every
		// empty fetch (MaxWait, 250 ms) of every partition says it.
		Logger: kafka.LoggerFunc(func(msg string, args ...any) {
			if !strings.HasPrefix(msg, "no messages received") && c.cfg.Log.Enabled(context.Background(), slog.LevelDebug) {
				c.cfg.Log.Debug("kafka reader: " + strings.TrimSpace(fmt.Sprintf(msg, args...)))
			}
		}),
	})
	s := &kafkaGoSource{r: r, dlq: &kafka.Writer{
		Addr:         c.client.Addr,
		Transport:    c.client.Transport,
		Topic:        c.cfg.DLQTopic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond, // the 1 s default would stall every batch with a bad event
		MaxAttempts:  3,
	}}
	if minBytes > 1 {
		s.wait = maxWait
	}
	return s, nil
}

func (s *kafkaGoSource) fetchWait() time.Duration { return s.wait }

// poll fetches one message: the Reader hands them out one at a time.
func (s *kafkaGoSource) poll(ctx context.Context, batch []message, _ int) ([]message, error) {
	m, err := s.r.FetchMessage(ctx)
	if err != nil {
		return batch, err
	}
	return append(batch, message{Topic: m.Topic, Partition: int32(m.Partition), Offset: m.Offset, Key: m.Key, Value: m.Value}), nil
}

// commit passes the Reader one message per partition, the batch's last:
// it commits each partition's highest offset (+1) of what it is given, so
// the rest of the batch would only be copied and compared in its loops.
func (s *kafkaGoSource) commit(ctx context.Context, batch []message) error {
	s.msgs = s.msgs[:0]
next:
	for i := range batch {
		m := &batch[i]
		for j := range s.msgs {
			if c := &s.msgs[j]; c.Partition == int(m.Partition) && c.Topic == m.Topic {
				c.Offset = max(c.Offset, m.Offset)
				continue next
			}
		}
		s.msgs = append(s.msgs, kafka.Message{Topic: m.Topic, Partition: int(m.Partition), Offset: m.Offset})
	}
	return s.r.CommitMessages(ctx, s.msgs...)
}

func (s *kafkaGoSource) deadLetter(ctx context.Context, msgs []message) error {
	out := make([]kafka.Message, len(msgs))
	for i, m := range msgs {
		out[i] = kafka.Message{Key: m.Key, Value: m.Value, Headers: []kafka.Header{
			// The headers of broker.Publisher.DeadLetter, so one topic has
			// one format, plus where exactly the message was.
			{Key: broker.HeaderReason, Value: []byte(m.Reason)},
			{Key: broker.HeaderSource, Value: []byte(m.Topic)},
			{Key: "partition", Value: strconv.AppendInt(nil, int64(m.Partition), 10)},
			{Key: "offset", Value: strconv.AppendInt(nil, m.Offset, 10)},
		}}
	}
	return s.dlq.WriteMessages(ctx, out...)
}

func (s *kafkaGoSource) close() {
	s.r.Close()
	s.dlq.Close()
}
