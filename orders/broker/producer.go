package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// producer is the Publisher's path to Kafka: a group commit per partition
// on kafka-go's Client.Produce, in place of kafka-go's Writer.
//
// Each partition has one sender goroutine and at most one produce request
// in flight. An event queues for its partition; an idle sender sends it at
// once, a busy one sends everything queued meanwhile as its next request.
// No timer is involved: at low load a publish costs one produce round
// trip (the Writer added BatchTimeout to it), under load batches grow by
// themselves to what queued during one round trip. One request in flight
// per partition keeps one key's events in order, retries included, as the
// Writer did.
//
// Why not the Writer: it waits BatchTimeout for every batch, asks the
// transport for the topic's partitions on every WriteMessages (served from
// its metadata cache, but allocating), spawns a goroutine and a timer per
// batch and keeps one batch in flight per partition behind that timer.
// Client.Produce goes straight to the transport, which routes the request
// to the partition's leader from the same metadata cache (refreshed every
// MetadataTTL) and keeps its connections: the only per-request costs left
// are the transport's hand-off to a connection goroutine and the round
// trip.
type producer struct {
	cfg    *PublisherConfig
	client *kafka.Client

	// Partition count of the topic, refreshed from the transport's
	// metadata cache at most every MetadataTTL.
	nparts    atomic.Int32
	partsAt   atomic.Int64 // unix ns of the last refresh
	partsMu   sync.Mutex   // one refresh at a time
	queues    atomic.Pointer[[]*partQueue]
	queuesMu  sync.Mutex // guards growing queues, closed
	closed    bool
	senders   sync.WaitGroup
	maxEvents int
	maxBytes  int

	requests, messages, errs, retries atomic.Int64 // cumulative
	batchMax                          atomic.Int64 // since the last Stats
	statReqs, statMsgs                atomic.Int64 // since the last Stats
	statErrs, statRetries             atomic.Int64
}

// maxRequestBytes caps the records of one produce request (kafka-go's
// Writer default BatchBytes; Kafka's default message.max.bytes is ~1MiB).
const maxRequestBytes = 1 << 20

// ErrPublisherClosed is returned by publishes after Close.
var ErrPublisherClosed = errors.New("orders: publisher closed")

// errGaveUp: the caller's time ran out or its context ended before Kafka
// answered. The event may still be written.
var errGaveUp = errors.New("orders: publish: no acknowledgement in time, outcome unknown")

func newProducer(cfg *PublisherConfig, tr *kafka.Transport) *producer {
	pr := &producer{
		cfg:       cfg,
		client:    &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: tr},
		maxEvents: cfg.BatchSize,
		maxBytes:  maxRequestBytes,
	}
	pr.queues.Store(new([]*partQueue))
	return pr
}

// pcall is one event's slot: pooled with its channel and timer. Each use
// sends exactly one value on done; the owner recycles it only after
// receiving it (a caller that gave up leaves it to the garbage collector).
type pcall struct {
	keyBuf   [20]byte
	key      []byte
	val      []byte // the encoded event, in valBuf when the publisher encoded it
	valBuf   []byte // kept across recycles: an event is encoded without allocating
	ctx      context.Context
	deadline int64 // unix ns; not sent, not retried for after it
	err      error
	// keep: a request carrying this call was abandoned on its deadline
	// while the transport may still be encoding it; key (in keyBuf) must
	// stay intact, so the owner does not recycle the call.
	keep  bool
	done  chan struct{}
	timer *time.Timer
}

var pcallPool = sync.Pool{New: func() any { return &pcall{done: make(chan struct{}, 1)} }}

func (c *pcall) alive(now int64) bool {
	return now < c.deadline && (c.ctx == nil || c.ctx.Err() == nil)
}

func (c *pcall) complete(err error) {
	c.err = err
	c.done <- struct{}{}
}

func (c *pcall) recycle() {
	if c.keep {
		return
	}
	*c = pcall{done: c.done, timer: c.timer, valBuf: c.valBuf[:0]}
	pcallPool.Put(c)
}

// partQueue is one partition's group commit.
type partQueue struct {
	id      int32
	mu      sync.Mutex
	pending []*pcall
	idle    bool // the sender waits on wake
	closed  bool
	wake    chan struct{} // cap 1
}

// partition is kafka.Hash's choice for key among n partitions, without its
// allocations: FNV-1a 32-bit, int32(sum) % n, negated if negative (Sarama's
// hashPartitioner). Existing topics keep their key -> partition mapping;
// TestPartitionMatchesKafkaHash holds it to kafka.Hash.
func partition(key []byte, n int32) int32 {
	h := uint32(2166136261)
	for _, b := range key {
		h ^= uint32(b)
		h *= 16777619
	}
	p := int32(h) % n
	if p < 0 {
		p = -p
	}
	return p
}

// partitions returns the topic's partition count: cached, refreshed from
// the transport's cache (no broker round trip) once MetadataTTL passed.
func (pr *producer) partitions(ctx context.Context, now int64) (int32, error) {
	n := pr.nparts.Load()
	if n > 0 {
		if now-pr.partsAt.Load() < int64(pr.cfg.MetadataTTL) || !pr.partsMu.TryLock() {
			return n, nil
		}
		defer pr.partsMu.Unlock()
		if m, err := pr.fetchPartitions(ctx); err == nil {
			pr.nparts.Store(m)
			n = m
		} else {
			pr.cfg.Log.Warn("kafka: partition count refresh failed; keeping the last", "topic", pr.cfg.Topic, "partitions", n, "err", err)
		}
		pr.partsAt.Store(now)
		return n, nil
	}
	pr.partsMu.Lock()
	defer pr.partsMu.Unlock()
	if n := pr.nparts.Load(); n > 0 {
		return n, nil
	}
	n, err := pr.fetchPartitions(ctx)
	if err != nil {
		return 0, err
	}
	pr.nparts.Store(n)
	pr.partsAt.Store(now)
	return n, nil
}

func (pr *producer) fetchPartitions(ctx context.Context) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, pr.cfg.Timeout)
	defer cancel()
	md, err := pr.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{pr.cfg.Topic}})
	if err != nil {
		return 0, err
	}
	for _, t := range md.Topics {
		if t.Name == pr.cfg.Topic {
			if t.Error != nil {
				return 0, t.Error
			}
			if len(t.Partitions) == 0 {
				return 0, kafka.UnknownTopicOrPartition
			}
			return int32(len(t.Partitions)), nil
		}
	}
	return 0, kafka.UnknownTopicOrPartition
}

// queue returns partition i's queue, starting its sender if new.
func (pr *producer) queue(i int32) (*partQueue, error) {
	if qs := *pr.queues.Load(); int(i) < len(qs) {
		return qs[i], nil
	}
	pr.queuesMu.Lock()
	defer pr.queuesMu.Unlock()
	if pr.closed {
		return nil, ErrPublisherClosed
	}
	old := *pr.queues.Load()
	if int(i) < len(old) {
		return old[i], nil
	}
	qs := make([]*partQueue, i+1)
	copy(qs, old)
	for j := len(old); j < len(qs); j++ {
		q := &partQueue{id: int32(j), wake: make(chan struct{}, 1)}
		qs[j] = q
		pr.senders.Add(1)
		go pr.run(q)
	}
	pr.queues.Store(&qs)
	return qs[i], nil
}

// enqueue hands c to its partition's sender.
func (pr *producer) enqueue(ctx context.Context, c *pcall, now int64) error {
	n, err := pr.partitions(ctx, now)
	if err != nil {
		return fmt.Errorf("orders: publish: partitions of %s: %w", pr.cfg.Topic, err)
	}
	q, err := pr.queue(partition(c.key, n))
	if err != nil {
		return err
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrPublisherClosed
	}
	q.pending = append(q.pending, c)
	wake := q.idle
	q.idle = false
	q.mu.Unlock()
	if wake {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// run is partition q's sender: it sends what queued, one request at a
// time, until the producer is closed and the queue drained.
func (pr *producer) run(q *partQueue) {
	defer pr.senders.Done()
	var batch, spare []*pcall
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			closed := q.closed
			q.idle = !closed
			q.mu.Unlock()
			if closed {
				return
			}
			<-q.wake
			continue
		}
		n, size := 0, 0
		for n < len(q.pending) && n < pr.maxEvents {
			c := q.pending[n]
			sz := len(c.key) + len(c.val) + 32 // record overhead, roughly
			if n > 0 && size+sz > pr.maxBytes {
				break
			}
			size += sz
			n++
		}
		if n == len(q.pending) {
			batch, q.pending = q.pending, spare[:0]
		} else {
			batch = append(spare[:0], q.pending[:n]...)
			m := copy(q.pending, q.pending[n:])
			clear(q.pending[m:])
			q.pending = q.pending[:m]
		}
		q.mu.Unlock()
		pr.send(q.id, batch)
		clear(batch)
		spare = batch[:0]
	}
}

// send writes batch to partition as one produce request (acks=all),
// retrying retriable errors with backoff while any of its callers still
// waits, and completes every call with the outcome.
func (pr *producer) send(part int32, batch []*pcall) {
	now := time.Now().UnixNano()
	// Calls whose caller already gave up are not sent: they fail (the
	// relay re-sends their outbox entries), and Kafka is spared them.
	n := 0
	for _, c := range batch {
		if c.alive(now) {
			batch[n] = c
			n++
		} else {
			c.complete(errGaveUp)
		}
	}
	live := batch[:n]
	if len(live) == 0 {
		return
	}
	// The records are the request's own: a request abandoned on its
	// deadline may still be encoded by the transport's connection
	// goroutine while the next one is built.
	kvs := make([]kv, len(live))
	for i, c := range live {
		kvs[i] = kv{c.key, c.val}
	}
	var err error
	abandoned := false
	for attempt := 0; attempt < pr.cfg.MaxAttempts; attempt++ {
		if attempt > 0 {
			pr.retries.Add(1)
			pr.statRetries.Add(1)
			time.Sleep(backoff(attempt, 20*time.Millisecond, 500*time.Millisecond))
			if !anyAlive(live, time.Now().UnixNano()) {
				break // nobody waits: the relay settles it
			}
		}
		err = pr.produce(part, &records{kvs: kvs})
		pr.requests.Add(1)
		pr.statReqs.Add(1)
		if err == nil {
			break
		}
		abandoned = abandoned || errors.Is(err, context.DeadlineExceeded)
		pr.errs.Add(1)
		pr.statErrs.Add(1)
		pr.cfg.Log.Warn("kafka: produce failed", "topic", pr.cfg.Topic, "partition", part, "events", len(live), "attempt", attempt+1, "err", err)
		if !retriable(err) {
			break
		}
	}
	pr.messages.Add(int64(len(live)))
	pr.statMsgs.Add(int64(len(live)))
	for m := pr.batchMax.Load(); int64(len(live)) > m && !pr.batchMax.CompareAndSwap(m, int64(len(live))); m = pr.batchMax.Load() {
	}
	if err != nil {
		err = fmt.Errorf("orders: publish: %w", err)
	}
	for _, c := range live {
		c.keep = abandoned
		c.complete(err)
	}
}

func anyAlive(calls []*pcall, now int64) bool {
	for _, c := range calls {
		if c.alive(now) {
			return true
		}
	}
	return false
}

// produce sends one request and returns Kafka's verdict on it.
func (pr *producer) produce(part int32, recs *records) error {
	ctx, cancel := context.WithTimeout(context.Background(), pr.cfg.WriteTimeout)
	defer cancel()
	res, err := pr.client.Produce(ctx, &kafka.ProduceRequest{
		Topic:        pr.cfg.Topic,
		Partition:    int(part),
		RequiredAcks: kafka.RequireAll,
		Records:      recs,
	})
	if err != nil {
		return err
	}
	if res.Error != nil {
		return res.Error
	}
	// A record error fails the whole batch (Kafka appends a batch or
	// nothing); it comes with a partition error, this is belt and braces.
	for _, e := range res.RecordErrors {
		return e
	}
	return nil
}

// retriable: what kafka-go's Writer retries (Kafka errors marked
// temporary, timeouts, connections reset or closed), plus a partition
// whose leader the metadata cache does not know yet.
func retriable(err error) bool {
	var temp interface{ Temporary() bool }
	if errors.As(err, &temp) && temp.Temporary() {
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, protocol.ErrNoLeader) ||
		errors.Is(err, context.DeadlineExceeded)
}

// backoff is kafka-go's: attempt² × min, at most max.
func backoff(attempt int, lo, hi time.Duration) time.Duration {
	return min(time.Duration(attempt*attempt)*lo, hi)
}

// close stops accepting events and waits until every sender has sent (or
// failed) what was queued. Each sender stops retrying once no caller waits,
// so this is bounded by about Timeout + WriteTimeout.
func (pr *producer) close() {
	pr.queuesMu.Lock()
	pr.closed = true
	qs := *pr.queues.Load()
	pr.queuesMu.Unlock()
	for _, q := range qs {
		q.mu.Lock()
		q.closed = true
		q.mu.Unlock()
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	pr.senders.Wait()
}

// stats are kafka.WriterStats-shaped deltas since the previous call, for
// PublisherStats.Writer.
func (pr *producer) stats() kafka.WriterStats {
	reqs, msgs := pr.statReqs.Swap(0), pr.statMsgs.Swap(0)
	st := kafka.WriterStats{
		Writes: reqs, Messages: msgs, Errors: pr.statErrs.Swap(0), Retries: pr.statRetries.Swap(0),
		MaxAttempts: int64(pr.cfg.MaxAttempts), MaxBatchSize: int64(pr.maxEvents),
		WriteTimeout: pr.cfg.WriteTimeout, RequiredAcks: int64(kafka.RequireAll),
		Topic: pr.cfg.Topic, ClientID: pr.cfg.ClientID,
	}
	// Batches, not requests: a retried batch counts once.
	if batches := reqs - st.Retries; batches > 0 {
		st.BatchSize = kafka.SummaryStats{Avg: msgs / batches, Max: pr.batchMax.Swap(0), Count: batches, Sum: msgs}
	}
	return st
}

// records feeds a request's events to the protocol encoder, reusing one
// Record (kafka-go's Writer does the same: the protocol encodes each record
// before reading the next).
type records struct {
	kvs      []kv
	i        int
	rec      kafka.Record
	key, val bytesReadCloser
}

type kv struct{ key, val []byte }

func (r *records) ReadRecord() (*kafka.Record, error) {
	if r.i >= len(r.kvs) {
		return nil, io.EOF
	}
	e := &r.kvs[r.i]
	r.i++
	r.key.Reset(e.key)
	r.val.Reset(e.val)
	r.rec = kafka.Record{Key: &r.key, Value: &r.val}
	return &r.rec, nil
}

type bytesReadCloser struct{ bytes.Reader }

func (*bytesReadCloser) Close() error { return nil }
