package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"flashgate/conf"
	"flashgate/internal/await"
	"flashgate/internal/chtest"
	"flashgate/internal/kafkatest"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/broker"
	"flashgate/orders/order"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
)

// ch is one clickhouse-server shared by the tests that do not stop it;
// each test gets its own database.
var ch *chtest.Server

// TestMain is also the kfake broker process of BenchmarkConsumerLiveCPU
// (kafkatest.StartProcess) and its feeder (serveLiveFeed).
func TestMain(m *testing.M) {
	serveLiveFeed()
	kafkatest.ServeChild()
	chtest.Main(m, &ch)
}

// kafkaConf and ordersConf are the kafka: and orders: sections with conf's
// defaults: what the edge passes the consumer.
var kafkaConf, ordersConf = conf.Defaults().Kafka, conf.Defaults().Orders

var testTopic = kafkaConf.Topic

var dbSeq atomic.Int64

func openCH(t testing.TB, addr string) *orderstore.ClickHouse {
	t.Helper()
	s, err := orderstore.OpenClickHouse(context.Background(), addr, fmt.Sprintf("c%d", dbSeq.Add(1)), orderstore.ClickHouseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newCH is a clickhouse-server of the test's own, for tests that stop it.
func newCH(t testing.TB) *chtest.Server { return chtest.New(t) }

// startKafka runs an in-process Kafka-protocol broker (kfake) with the
// orders topic (4 partitions).
func startKafka(t testing.TB) ([]string, *kfake.Cluster) {
	t.Helper()
	return kafkatest.Start(t, kfake.SeedTopics(4, testTopic))
}

func openStock(t testing.TB) *stock.Store {
	t.Helper()
	return stocktest.Open(t, redistest.New(t).Addr())
}

var orderSeq atomic.Int64

func init() { orderSeq.Store(time.Now().UnixNano() / 1000) }

// sell warms the sales and buys until each is sold out, through the real
// deduction script (coalesced, from several goroutines), then reads the
// events the script wrote to the outbox — what the edge publishes — and
// empties the outbox as the edge does once Kafka acknowledged them.
func sell(t testing.TB, st *stock.Store, stocks map[string]int64) []order.Event {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	for p, n := range stocks {
		if _, err := st.Warm(ctx, stock.SaleStock{ProductID: p, Stock: n, Limit: 2, Price: 9900,
			StartMs: now.UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli()}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var errs atomic.Value
	for p := range stocks {
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					id := orderSeq.Add(1)
					ms := time.Now().UnixMilli()
					out, err := st.Deduct(ctx, stock.Attempt{
						Order: order.Order{
							ProductID: p, UserID: fmt.Sprintf("u%d-%d", w, i/2), Qty: 1, ID: id, PriceCents: 9900, CreatedMs: ms,
							Edge: 1 + w%3,
						},
						Limit: 2, TokenNonceHex: strconv.FormatInt(id, 16), TokenExpiresMs: ms + 60_000,
					})
					if err != nil {
						errs.Store(err)
						return
					}
					if out.Code == stock.SoldOut || out.Remaining == 0 {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if err, _ := errs.Load().(error); err != nil {
		t.Fatal(err)
	}
	var evs []order.Event
	for p := range stocks {
		evs = append(evs, drainOutbox(t, st, p)...)
	}
	return evs
}

func drainOutbox(t testing.TB, st *stock.Store, p string) []order.Event {
	t.Helper()
	ctx := context.Background()
	outbox, err := st.OutboxOrders(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]order.Event, 0, len(outbox))
	for i := range outbox {
		evs = append(evs, broker.OrderEvent(&outbox[i]))
	}
	c := redistest.Client(t, st.Addr())
	if err := c.Do(ctx, c.B().Del().Key(stock.OutboxKey(p)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	return evs
}

func newWriter(brokers []string, topic string) *kafka.Writer {
	return &kafka.Writer{
		Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond, BatchSize: 1000,
	}
}

func publish(t testing.TB, w *kafka.Writer, evs []order.Event) {
	t.Helper()
	msgs := make([]kafka.Message, 0, len(evs))
	for i := range evs {
		b, err := evs[i].Encode()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: evs[i].Key(), Value: b})
	}
	publishRaw(t, w, msgs)
}

func publishRaw(t testing.TB, w *kafka.Writer, msgs []kafka.Message) {
	t.Helper()
	for lo := 0; lo < len(msgs); lo += 2000 {
		if err := w.WriteMessages(context.Background(), msgs[lo:min(lo+2000, len(msgs))]...); err != nil {
			t.Fatal(err)
		}
	}
}

// start runs a consumer until the test ends. The settings edge.yaml has
// and the test leaves out are the edge's (conf's defaults).
func start(t testing.TB, cfg Config) *Consumer {
	t.Helper()
	cfg.Topic = cmp.Or(cfg.Topic, kafkaConf.Topic)
	cfg.DLQTopic = cmp.Or(cfg.DLQTopic, kafkaConf.DLQTopic)
	cfg.Group = cmp.Or(cfg.Group, ordersConf.Group)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, ordersConf.BatchSize)
	cfg.BatchTime = cmp.Or(cfg.BatchTime, ordersConf.BatchTime)
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
		if testing.Verbose() {
			cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return c
}

// awaitState waits until cond holds; a failure names the state cond saw last.
func awaitState(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	await.NoError(t, within, what, func() error {
		if ok, state := cond(); !ok {
			return errors.New(state)
		}
		return nil
	})
}

func storedRows(s orderstore.Store, products []string) (int64, error) {
	var n int64
	for _, p := range products {
		tot, err := s.Totals(context.Background(), p)
		if err != nil {
			return 0, err
		}
		n += tot.HeldOrders() + tot.ReleasedOrders() + tot.Duplicates
	}
	return n, nil
}
