package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"flashgate/orders/broker"
)

// kgoSource reads with franz-go's client (kgo): the alternative
// BenchmarkConsumerCPU and BenchmarkConsumerLiveCPU measure side by side
// with the consumer's kafkaGoSource. It hands over a fetch's records at
// once, where kafka-go's Reader passes them one at a time through a
// channel. Test-only: it connects in plaintext (no broker.Security).
type kgoSource struct {
	cl      *kgo.Client
	wait    time.Duration // as kafkaGoSource's
	dlq     string
	records []*kgo.Record // commit's, reused
}

// newKgoSource fetches as newKafkaGoSource does.
func newKgoSource(c *Consumer) (source, error) {
	if c.cfg.BatchTime < minWaitingBatch {
		return newKgoSourceFetch(c, 1, 250*time.Millisecond)
	}
	return newKgoSourceFetch(c, waitBytes, c.cfg.BatchTime)
}

func newKgoSourceFetch(c *Consumer, minBytes int32, maxWait time.Duration) (source, error) {
	opts := []kgo.Opt{
		kgo.FetchMinBytes(minBytes),
		kgo.SeedBrokers(c.cfg.Brokers...),
		kgo.ClientID("flashgate"),
		kgo.ConsumerGroup(c.cfg.Group),
		kgo.ConsumeTopics(c.cfg.Topic),
		// The eager range protocol, as kafka-go's Reader joined with: old
		// and new edges share the group during an upgrade.
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.DisableAutoCommit(), // commit is synchronous: offsets move only after the store
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(c.cfg.SessionTimeout),
		kgo.RebalanceTimeout(c.cfg.RebalanceTimeout),
		kgo.HeartbeatInterval(time.Second),
		kgo.FetchMaxWait(maxWait),
		kgo.FetchMaxBytes(10 << 20),
		kgo.RetryBackoffFn(func(tries int) time.Duration {
			return min(10*time.Millisecond<<min(tries, 6), 500*time.Millisecond)
		}),
		// The dead-letter topic's writes: acks=all, sent at once (a bad
		// event holds its batch until they are), given up after 10 s so
		// that the consumer's own retry logs and backs off.
		kgo.DefaultProduceTopic(c.cfg.DLQTopic),
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(10 * time.Second),
		kgo.WithLogger(kgoLogger{c.cfg.Log}),
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("consumer: kafka client: %w", err)
	}
	s := &kgoSource{cl: cl, dlq: c.cfg.DLQTopic}
	if minBytes > 1 {
		s.wait = maxWait
	}
	return s, nil
}

func (s *kgoSource) fetchWait() time.Duration { return s.wait }

func (s *kgoSource) poll(ctx context.Context, batch []message, max int) ([]message, error) {
	fs := s.cl.PollRecords(ctx, max)
	var errs []error
	for i := range fs {
		for j := range fs[i].Topics {
			t := &fs[i].Topics[j]
			for k := range t.Partitions {
				p := &t.Partitions[k]
				if p.Err != nil {
					errs = append(errs, p.Err)
				}
				for _, r := range p.Records {
					batch = append(batch, message{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, rec: r})
				}
			}
		}
	}
	return batch, errors.Join(errs...)
}

func (s *kgoSource) commit(ctx context.Context, batch []message) error {
	s.records = s.records[:0]
	for i := range batch {
		s.records = append(s.records, batch[i].rec.(*kgo.Record))
	}
	return s.cl.CommitRecords(ctx, s.records...)
}

func (s *kgoSource) deadLetter(ctx context.Context, msgs []message) error {
	recs := make([]*kgo.Record, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		recs[i] = &kgo.Record{Topic: s.dlq, Key: m.Key, Value: m.Value,
			// The headers of broker.Publisher.DeadLetter, so one topic has
			// one format, plus where exactly the message was.
			Headers: []kgo.RecordHeader{
				{Key: broker.HeaderReason, Value: []byte(m.Reason)},
				{Key: broker.HeaderSource, Value: []byte(m.Topic)},
				{Key: "partition", Value: strconv.AppendInt(nil, int64(m.Partition), 10)},
				{Key: "offset", Value: strconv.AppendInt(nil, m.Offset, 10)},
			}}
	}
	return s.cl.ProduceSync(ctx, recs...).FirstErr()
}

func (s *kgoSource) close() { s.cl.Close() }

// kgoLogger passes franz-go's warnings and errors to the consumer's log.
type kgoLogger struct{ log *slog.Logger }

func (kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if level == kgo.LogLevelError {
		l.log.Error("kafka client: "+msg, keyvals...)
		return
	}
	l.log.Warn("kafka client: "+msg, keyvals...)
}
