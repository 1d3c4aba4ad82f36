package broker

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"flashgate/conf"
	"flashgate/internal/kafkatest"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/order"
	"flashgate/orders/stock"
)

// kafkaConf is the kafka: section with conf's defaults: what the edge
// passes the publisher.
var kafkaConf = conf.Defaults().Kafka

// testTopics are the orders and DLQ topics as the edge creates them.
func testTopics() []Topic { return Topics(kafkaConf.Topic, kafkaConf.DLQTopic, kafkaConf.Partitions) }

// startKafka is a kfake cluster with the orders and DLQ topics.
func startKafka(t testing.TB, opts ...kfake.Opt) ([]string, *kfake.Cluster) {
	t.Helper()
	brokers, c := kafkatest.Start(t, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := EnsureTopics(ctx, brokers, Security{}, testTopics()...); err != nil {
		t.Fatal(err)
	}
	return brokers, c
}

// testLog sends a component's log to the test's log.
func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// withKafkaConf gives cfg the kafka: settings the test leaves out, as the
// edge passes them.
func withKafkaConf(cfg PublisherConfig) PublisherConfig {
	cfg.Topic = cmp.Or(cfg.Topic, kafkaConf.Topic)
	cfg.DLQTopic = cmp.Or(cfg.DLQTopic, kafkaConf.DLQTopic)
	cfg.BatchTimeout = cmp.Or(cfg.BatchTimeout, kafkaConf.BatchTimeout)
	cfg.Timeout = cmp.Or(cfg.Timeout, kafkaConf.Timeout)
	return cfg
}

func newPublisher(t testing.TB, cfg PublisherConfig) *Publisher {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = testLog(t)
	}
	p, err := NewPublisher(withKafkaConf(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// record is one message read back from a topic.
type record struct {
	partition int
	offset    int64
	key       string
	value     []byte
	headers   map[string]string
	time      time.Time // the record's timestamp (CreateTime, set by the producer)
}

// readAll reads every message of topic, all partitions, up to the high
// watermarks at the time of the call.
func readAll(t testing.TB, brokers []string, topic string) []record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Its own transport: the default one caches leaders for 6s, stale
	// once a test moved them.
	tr := &kafka.Transport{MetadataTTL: 50 * time.Millisecond}
	defer tr.CloseIdleConnections()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr}
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 || md.Topics[0].Error != nil {
		t.Fatalf("metadata %s: %v %+v", topic, err, md)
	}
	var out []record
	for _, p := range md.Topics[0].Partitions {
		for off := int64(0); ; {
			res, err := cl.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: p.ID, Offset: off, MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 50 * time.Millisecond})
			if err != nil {
				t.Fatalf("fetch %s/%d@%d: %v", topic, p.ID, off, err)
			}
			if res.Error != nil {
				var ke kafka.Error
				if errors.As(res.Error, &ke) && ke.Temporary() && ctx.Err() == nil {
					time.Sleep(10 * time.Millisecond) // leader moved: metadata refresh
					continue
				}
				t.Fatalf("fetch %s/%d@%d: %v", topic, p.ID, off, res.Error)
			}
			hw := res.HighWatermark
			for {
				r, err := res.Records.ReadRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("read %s/%d: %v", topic, p.ID, err)
				}
				if r.Offset < off {
					continue
				}
				rec := record{partition: p.ID, offset: r.Offset, headers: map[string]string{}, time: r.Time}
				if r.Key != nil {
					k, _ := kafka.ReadAll(r.Key)
					rec.key = string(k)
				}
				if r.Value != nil {
					rec.value, _ = kafka.ReadAll(r.Value)
				}
				for _, h := range r.Headers {
					rec.headers[h.Key] = string(h.Value)
				}
				out = append(out, rec)
				off = r.Offset + 1
			}
			if off >= hw {
				break
			}
		}
	}
	return out
}

// readOrders decodes the orders topic: events and how often each order id
// occurs.
func readOrders(t testing.TB, brokers []string) (map[int64]order.Event, map[int64]int) {
	t.Helper()
	evs, counts := map[int64]order.Event{}, map[int64]int{}
	for _, r := range readAll(t, brokers, kafkaConf.Topic) {
		e, err := order.Decode(r.value)
		if err != nil {
			t.Fatalf("offset %d/%d: %v", r.partition, r.offset, err)
		}
		if r.key != strconv.FormatInt(e.ID, 10) {
			t.Fatalf("key %q for order %d", r.key, e.ID)
		}
		evs[e.ID] = e
		counts[e.ID]++
	}
	return evs, counts
}

// openStore is a stock.Store on redis-server ("real") or miniredis
// ("embedded").
func openStore(t testing.TB, kind string) *stock.Store {
	t.Helper()
	addr := "embedded"
	if kind == "real" {
		addr = redistest.Start(t)
	}
	return stocktest.Open(t, addr)
}

var orderSeq atomic.Int64

func init() { orderSeq.Store(time.Now().UnixNano() / 1000) }

// deduct buys one unit as a new user and returns the attempt and its
// outbox entry id.
func deduct(t testing.TB, s *stock.Store, product string) (stock.Attempt, string) {
	t.Helper()
	id := orderSeq.Add(1)
	now := time.Now().UnixMilli()
	a := stock.Attempt{
		Order: order.Order{
			ProductID: product, UserID: "u" + strconv.FormatInt(id, 10), Qty: 1, ID: id, PriceCents: 990,
			CreatedMs: now, Edge: 3,
		},
		Limit: 1000, TokenNonceHex: strconv.FormatInt(id, 16), TokenExpiresMs: now + 60_000,
	}
	out, err := s.Deduct(context.Background(), a)
	if err != nil || out.Code != stock.OK || out.OutboxID == "" {
		t.Fatalf("Deduct: %+v %v", out, err)
	}
	return a, out.OutboxID
}

func outboxLen(t testing.TB, s *stock.Store, product string) int64 {
	t.Helper()
	n, err := s.OutboxLen(context.Background(), product)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// pendingCount is the relay group's pending list length (XPENDING summary).
func pendingCount(t testing.TB, s *stock.Store, product string) int64 {
	t.Helper()
	c := redistest.Client(t, s.Addr())
	arr, err := c.Do(context.Background(), c.B().Xpending().Key(stock.OutboxKey(product)).Group(stock.RelayGroup).Build()).ToArray()
	if err != nil || len(arr) == 0 {
		t.Fatalf("XPENDING: %v %v", arr, err)
	}
	n, err := arr[0].AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
