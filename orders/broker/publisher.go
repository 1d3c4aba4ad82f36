package broker

import (
	"context"
	"errors"
	"flashgate/conf"
	"flashgate/orders/order"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
)

// PublisherConfig configures a Publisher. Brokers are required; the
// settings edge.yaml has (Topic, DLQTopic, BatchTimeout, Timeout: kafka.*)
// take conf's defaults when zero; the others have defaults of their own.
type PublisherConfig struct {
	Brokers []string
	// Security is how it connects (TLS, SASL); the zero value is plaintext.
	Security Security
	Topic    string
	DLQTopic string

	// BatchTimeout is how long the dead-letter writer's batch waits for
	// more messages (kafka-go's 1s default would stall every dead-lettering).
	// Order events do not wait for any timer: they go through a group
	// commit per partition (see producer).
	BatchTimeout time.Duration
	// BatchSize caps the events of one produce request (default 1000);
	// what queued beyond it goes in the next request at once.
	BatchSize int
	// Timeout bounds one publish from the caller's view, on top of the
	// caller's context. When it runs out the event may still be written
	// later (a request in flight or retried): the outcome is unknown, and
	// the outbox relay settles it. Events whose callers gave up are neither
	// sent nor retried any more.
	Timeout time.Duration
	// WriteTimeout bounds one produce request (default 2s).
	WriteTimeout time.Duration
	// MaxAttempts is how often a produce request is tried on retriable
	// errors (default 10), backing off from 20ms to 500ms.
	MaxAttempts int
	// MetadataTTL is how long partition leaders are cached (default 1s):
	// kafka-go's 6s default stalled writes for up to 5s when leaders
	// moved (measured here against kfake's partition moves; 1s cut the
	// stall to 1.4s).
	MetadataTTL time.Duration
	ClientID    string // default "flashgate"

	// Outbox, if set, receives the acknowledgements of PublishAndAck
	// (*stock.Store implements it).
	Outbox OutboxAcker
	// AckQueue is how many outbox acknowledgements may wait for the
	// background acker (default 8192); beyond it PublishAndAck acks inline.
	AckQueue int

	Log *slog.Logger // default slog.Default()
}

// OutboxAcker removes acknowledged outbox entries; *stock.Store is one.
type OutboxAcker interface {
	AckOutbox(ctx context.Context, productID string, ids ...string) error
}

// check rejects a config without what it needs, fills the zero edge.yaml
// settings from conf's defaults, refuses one that is set but invalid, and
// fills the settings that are not edge.yaml's.
func (c *PublisherConfig) check() error {
	if len(c.Brokers) == 0 {
		return errors.New("orders: publisher: no brokers")
	}
	k := conf.KafkaConfig{Topic: c.Topic, DLQTopic: c.DLQTopic, BatchTimeout: c.BatchTimeout, Timeout: c.Timeout}.WithDefaults()
	c.Topic, c.DLQTopic, c.BatchTimeout, c.Timeout = k.Topic, k.DLQTopic, k.BatchTimeout, k.Timeout
	if c.BatchTimeout < 0 || c.Timeout < 0 {
		return fmt.Errorf("orders: publisher: BatchTimeout and Timeout must not be negative (kafka.batch_timeout, kafka.timeout), got %v and %v", c.BatchTimeout, c.Timeout)
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 1000
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 2 * time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	if c.MetadataTTL <= 0 {
		c.MetadataTTL = time.Second
	}
	if c.ClientID == "" {
		c.ClientID = "flashgate"
	}
	if c.AckQueue <= 0 {
		c.AckQueue = 8192
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Publisher writes order events to Kafka and returns only once Kafka
// acknowledged them (acks=all), or with an error. Concurrent calls share
// produce requests: per partition, one request is in flight and what
// queued meanwhile goes as the next one (no timer), so many shoppers cost
// one produce request per partition per round trip. Safe for concurrent
// use.
//
// kafka-go has no idempotent producer: a retried batch whose first try was
// applied (e.g. REQUEST_TIMED_OUT) is written twice. Consumers dedupe by
// order id.
type Publisher struct {
	cfg       PublisherConfig
	transport *kafka.Transport
	pr        *producer
	dlq       *kafka.Writer

	ackMu     sync.RWMutex // guards ackClosed against sends on a closed ackCh
	ackClosed bool
	ackCh     chan ackReq
	ackDone   chan struct{}

	published, failed, acked, ackErrors, deadLettered atomic.Uint64

	flights *Flights
}

type ackReq struct{ product, id string }

// NewPublisher builds a Publisher. It does not connect: the first publish
// does, and a broker that is down shows as publish errors.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, flights: NewFlights()}
	p.transport = cfg.Security.Transport(cfg.ClientID, cfg.MetadataTTL)
	p.dlq = &kafka.Writer{
		Addr:            kafka.TCP(cfg.Brokers...),
		Topic:           cfg.DLQTopic,
		Balancer:        &kafka.Hash{}, // key = order id: one order's events stay in order
		RequiredAcks:    kafka.RequireAll,
		BatchTimeout:    cfg.BatchTimeout,
		BatchSize:       cfg.BatchSize,
		WriteTimeout:    cfg.WriteTimeout,
		ReadTimeout:     cfg.WriteTimeout,
		MaxAttempts:     cfg.MaxAttempts,
		WriteBackoffMin: 20 * time.Millisecond,
		WriteBackoffMax: 500 * time.Millisecond,
		Transport:       p.transport,
		ErrorLogger:     kafka.LoggerFunc(func(f string, args ...any) { cfg.Log.Warn("kafka: " + fmt.Sprintf(f, args...)) }),
	}
	p.pr = newProducer(&p.cfg, p.transport)
	if cfg.Outbox != nil {
		p.ackCh, p.ackDone = make(chan ackReq, cfg.AckQueue), make(chan struct{})
		go p.runAcker()
	}
	return p, nil
}

// Flights is the work that may still put events into Kafka through this
// Publisher: the relay's sweeps count themselves, and the sale counts each
// purchase from its deduction to its publish.
func (p *Publisher) Flights() *Flights { return p.flights }

// InFlightBound is how long an event handed to Publish may still reach
// Kafka: a caller waits at most Timeout, a produce request started just
// before that runs up to WriteTimeout, and nothing is retried once no caller
// waits (producer.send); a second for a request the broker is still
// appending when the edge stopped waiting.
func (p *Publisher) InFlightBound() time.Duration {
	return p.cfg.Timeout + p.cfg.WriteTimeout + time.Second
}

// Publish publishes events, returning once Kafka acknowledged all of them.
// When only some of several failed, the error is a kafka.WriteErrors with
// one entry per event (nil for those acknowledged). Any error means the
// failed events may or may not be in Kafka.
func (p *Publisher) Publish(ctx context.Context, evs ...order.Event) error {
	switch {
	case len(evs) == 0:
		return nil
	case len(evs) == 1:
		return p.publishOne(ctx, &evs[0])
	}
	return p.publishMany(ctx, evs)
}

// newCall encodes e into a pooled call with the publish's deadline.
func (p *Publisher) newCall(ctx context.Context, e *order.Event, now int64) (*pcall, error) {
	c := pcallPool.Get().(*pcall)
	v, err := e.AppendEncode(c.valBuf[:0])
	if err != nil {
		c.recycle()
		return nil, fmt.Errorf("orders: publish: %w", err)
	}
	c.valBuf = v
	c.key = strconv.AppendInt(c.keyBuf[:0], e.ID, 10)
	c.val = v
	c.ctx = ctx
	c.deadline = now + int64(p.cfg.Timeout)
	if dl, ok := ctx.Deadline(); ok && dl.UnixNano() < c.deadline {
		c.deadline = dl.UnixNano()
	}
	return c, nil
}

func (p *Publisher) publishOne(ctx context.Context, e *order.Event) error {
	now := time.Now().UnixNano()
	c, err := p.newCall(ctx, e, now)
	if err == nil {
		err = p.pr.enqueue(ctx, c, now)
		if err != nil {
			c.recycle()
		}
	}
	if err != nil {
		p.failed.Add(1)
		return err
	}
	t := c.startTimer(time.Duration(c.deadline - now))
	select {
	case <-c.done:
		t.Stop()
		err = c.err
		c.recycle()
	case <-t.C:
		err = errGaveUp // c stays with its sender: not recycled
	case <-ctx.Done():
		t.Stop()
		err = fmt.Errorf("%w: %w", errGaveUp, ctx.Err())
	}
	if err != nil {
		p.failed.Add(1)
		return err
	}
	p.published.Add(1)
	return nil
}

// startTimer arms the call's pooled timer (Go 1.23+ timers: Reset and Stop
// never leave a stale tick behind).
func (c *pcall) startTimer(d time.Duration) *time.Timer {
	if c.timer == nil {
		c.timer = time.NewTimer(d)
	} else {
		c.timer.Reset(d)
	}
	return c.timer
}

func (p *Publisher) publishMany(ctx context.Context, evs []order.Event) error {
	now := time.Now().UnixNano()
	calls := make([]*pcall, len(evs))
	werr := make(kafka.WriteErrors, len(evs))
	failed := 0
	for i := range evs {
		c, err := p.newCall(ctx, &evs[i], now)
		if err == nil {
			if err = p.pr.enqueue(ctx, c, now); err != nil {
				c.recycle()
			}
		}
		if err != nil {
			werr[i] = err
			failed++
			continue
		}
		calls[i] = c
	}
	t := time.NewTimer(time.Duration(p.cfg.Timeout))
	defer t.Stop()
	gaveUp := error(nil)
	for i, c := range calls {
		if c == nil {
			continue
		}
		if gaveUp == nil {
			select {
			case <-c.done:
				werr[i] = c.err
				c.recycle()
			case <-t.C:
				gaveUp = errGaveUp
			case <-ctx.Done():
				gaveUp = fmt.Errorf("%w: %w", errGaveUp, ctx.Err())
			}
		}
		if gaveUp != nil {
			werr[i] = gaveUp // c stays with its sender: not recycled
		}
		if werr[i] != nil {
			failed++
		}
	}
	p.failed.Add(uint64(failed))
	p.published.Add(uint64(len(evs) - failed))
	if failed == 0 {
		return nil
	}
	return werr
}

// PublishAndAck publishes e and, once Kafka acknowledged it, hands the
// order's outbox entry (stock.Outcome.OutboxID) to the background acker,
// which removes it from Redis (XDEL + XACK, batched per product). The caller
// answers "pending" as soon as this returns nil: the removal is cleanup, not
// part of the promise. If it is lost (crash, Redis error) the relay re-sends
// the entry after its MinAge and the consumer drops the duplicate.
//
// On error the entry stays in the outbox for the relay: answer 503 with the
// order id. When the acker's queue is full the entry is removed inline.
func (p *Publisher) PublishAndAck(ctx context.Context, e order.Event, outboxID string) error {
	if err := p.Publish(ctx, e); err != nil {
		return err
	}
	if p.ackCh == nil || outboxID == "" {
		return nil
	}
	p.ackMu.RLock()
	queued := false
	if !p.ackClosed {
		select {
		case p.ackCh <- ackReq{e.ProductID, outboxID}:
			queued = true
		default:
		}
	}
	p.ackMu.RUnlock()
	if !queued {
		p.ack(context.WithoutCancel(ctx), e.ProductID, outboxID)
	}
	return nil
}

// runAcker removes acknowledged outbox entries: everything queued while
// the previous removal ran goes as one XDEL/XACK per product (group commit,
// no timer).
func (p *Publisher) runAcker() {
	defer close(p.ackDone)
	batch := map[string][]string{}
	for r := range p.ackCh {
		batch[r.product] = append(batch[r.product], r.id)
	drain:
		for n := 1; n < 4096; n++ {
			select {
			case r, ok := <-p.ackCh:
				if !ok {
					break drain
				}
				batch[r.product] = append(batch[r.product], r.id)
			default:
				break drain
			}
		}
		for product, ids := range batch {
			p.ack(context.Background(), product, ids...)
			delete(batch, product)
		}
	}
}

func (p *Publisher) ack(ctx context.Context, product string, ids ...string) {
	if err := p.cfg.Outbox.AckOutbox(ctx, product, ids...); err != nil {
		p.ackErrors.Add(uint64(len(ids)))
		p.cfg.Log.Warn("outbox ack failed; the relay will re-send", "product", product, "entries", len(ids), "err", err)
		return
	}
	p.acked.Add(uint64(len(ids)))
}

// DLQ header names.
const (
	HeaderReason = "reason" // why the message was dead-lettered
	HeaderSource = "source" // where it came from, e.g. "outbox" or the topic
)

// DeadLetter writes a message that cannot be processed to the dead-letter
// topic, synchronously, with the reason and source as headers.
func (p *Publisher) DeadLetter(ctx context.Context, key, value []byte, source, reason string) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	err := p.dlq.WriteMessages(ctx, kafka.Message{Key: key, Value: value, Headers: []kafka.Header{
		{Key: HeaderReason, Value: []byte(reason)}, {Key: HeaderSource, Value: []byte(source)},
	}})
	if err != nil {
		return fmt.Errorf("orders: dead-letter: %w", err)
	}
	p.deadLettered.Add(1)
	return nil
}

// PublisherStats are counters since NewPublisher.
type PublisherStats struct {
	Published    uint64 // events Kafka acknowledged
	Failed       uint64 // events whose publish returned an error
	Acked        uint64 // outbox entries removed after their publish
	AckErrors    uint64 // outbox entries whose removal failed (the relay re-sends them)
	DeadLettered uint64
	Requests     uint64 // produce requests sent for order events, retries included
	Retries      uint64 // of those, retries
	// Writer is kept in kafka-go's shape for existing readers: deltas
	// since the previous call (Writes, Messages, Errors, Retries,
	// BatchSize Avg/Max/Count/Sum) of the order events' produce requests.
	Writer kafka.WriterStats
}

// Stats returns the counters. Writer holds deltas since the previous call:
// call it from one place (the metrics scrape).
func (p *Publisher) Stats() PublisherStats {
	st := PublisherStats{
		Published: p.published.Load(), Failed: p.failed.Load(), Acked: p.acked.Load(),
		AckErrors: p.ackErrors.Load(), DeadLettered: p.deadLettered.Load(),
	}
	st.Writer = p.pr.stats()
	st.Requests, st.Retries = uint64(p.pr.requests.Load()), uint64(p.pr.retries.Load())
	return st
}

// Close sends the events already queued (failing those whose callers gave
// up), flushes queued outbox acknowledgements and closes the dead-letter
// writer. Publishes waiting in Close return; Publish after Close fails
// with ErrPublisherClosed. Safe to call more than once.
func (p *Publisher) Close() error {
	p.pr.close()
	if p.ackCh != nil {
		p.ackMu.Lock()
		already := p.ackClosed
		p.ackClosed = true
		if !already {
			close(p.ackCh)
		}
		p.ackMu.Unlock()
		<-p.ackDone
	}
	err := p.dlq.Close()
	p.transport.CloseIdleConnections()
	return err
}
