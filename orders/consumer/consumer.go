package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"flashgate/conf"
	"flashgate/orders/broker"
	"flashgate/orders/order"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
)

// Config configures a Consumer. Brokers and Store are required; the
// settings edge.yaml has (Topic, Group, DLQTopic, BatchSize, BatchTime:
// kafka.* and orders.*) take conf's defaults when zero; the others have
// defaults of their own. BatchTimeMax is taken as given: 0 keeps the batch
// time fixed.
type Config struct {
	Brokers  []string
	Topic    string
	Group    string
	DLQTopic string // created (1 partition) if missing
	// ReplicationFactor and MinInsyncReplicas are the dead-letter topic's
	// when the consumer creates it (kafka.replication_factor,
	// kafka.min_insync_replicas; 0: 1 and the broker's default).
	ReplicationFactor, MinInsyncReplicas int
	// Security is how the reader and the dead-letter writer connect (TLS,
	// SASL); the zero value is plaintext.
	Security  broker.Security
	BatchSize int
	BatchTime time.Duration // counted from a batch's first message
	// BatchTimeMax, if above BatchTime, lets the batch time grow under a
	// steady stream (orders.batch_time_max): see fetch.
	BatchTimeMax time.Duration

	Store orderstore.Store
	// Stock, if set, gets MarkSuccess for every stored order.
	Stock *stock.Store
	// OnStored, if set, is called after each batch with the order ids
	// of the order events it stored (status 0), by product (after MarkSuccess was tried). It
	// runs on the consumer's goroutine: hand work off, don't block.
	OnStored func(products map[string][]int64)

	// MinBackoff and MaxBackoff bound the retry delay of a failing insert
	// or dead-letter write (defaults 50ms and 2s).
	MinBackoff, MaxBackoff time.Duration
	// SessionTimeout is the group session (default 10s): a consumer that
	// died is replaced after it. Heartbeats go on while an insert retries.
	SessionTimeout time.Duration
	// RebalanceTimeout is how long the coordinator waits for the members
	// to rejoin in a rebalance (default SessionTimeout/2: 5s). A
	// JoinGroup's read deadline in kafka-go is 5s + RebalanceTimeout; the
	// embedded broker (kfake) restarts that wait at every join, leave and
	// expiry, and expires a member parked in JoinGroup when its session
	// lapses without answering it. With kafka-go's 30s default, consumers
	// killed and restarted a few times kept the group rebalancing for
	// minutes (TestConsumerRejoinsAfterRepeatedKills); under the session
	// timeout, the rebalance ends, dropping the dead members, before a
	// live member's session or its JoinGroup's deadline runs out.
	RebalanceTimeout time.Duration
	// StallAfter is how long a partition with lag may keep the same
	// committed offset, while this consumer's inserts succeed and the
	// group is Stable, before the consumer leaves and rejoins the group to
	// rebalance it (negative: never). See stall.go: kfake keeps a member
	// killed mid-join for good. Default 3*SessionTimeout (30s): a dead
	// member that the broker does drop holds its partitions, under kfake,
	// for up to the join wait (RebalanceTimeout), its session from that
	// join's end, and the rebalance that drops it (RebalanceTimeout) — 20s
	// — plus a fetch and a commit; 2*SessionTimeout rejoined in 2 of 10
	// runs of TestConsumerRejoinsAfterRepeatedKills while the group was
	// recovering by itself.
	StallAfter time.Duration
	Log        *slog.Logger

	// newSource, if set, is the Kafka client Run reads with (tests;
	// default newKafkaGoSource).
	newSource func(*Consumer) (source, error)
	// stallCheck is how often the stall watch reads the group's offsets
	// (default SessionTimeout/5: 2s); partitionLags and groupState how
	// it reads them and the group's state (tests; default the brokers').
	stallCheck    time.Duration
	partitionLags func(context.Context, *Consumer) ([]partitionLag, error)
	groupState    func(context.Context, *Consumer) (string, error)
}

// check rejects a config without what it needs, fills the zero edge.yaml
// settings from conf's defaults, refuses one that is set but invalid, and
// fills the settings that are not edge.yaml's.
func (c *Config) check() error {
	if len(c.Brokers) == 0 {
		return errors.New("consumer: no brokers")
	}
	if c.Store == nil {
		return errors.New("consumer: no order store")
	}
	k := conf.KafkaConfig{Topic: c.Topic, DLQTopic: c.DLQTopic}.WithDefaults()
	o := conf.OrdersConfig{Group: c.Group, BatchSize: c.BatchSize, BatchTime: c.BatchTime}.WithDefaults()
	c.Topic, c.DLQTopic, c.Group, c.BatchSize, c.BatchTime = k.Topic, k.DLQTopic, o.Group, o.BatchSize, o.BatchTime
	if c.BatchSize < 0 || c.BatchTime < 0 {
		return fmt.Errorf("consumer: BatchSize and BatchTime must not be negative (orders.batch_size, orders.batch_time), got %d and %v", c.BatchSize, c.BatchTime)
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 50 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 2 * time.Second
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.RebalanceTimeout <= 0 {
		c.RebalanceTimeout = c.SessionTimeout / 2
	}
	if c.StallAfter == 0 {
		c.StallAfter = 3 * c.SessionTimeout
	}
	if c.stallCheck <= 0 {
		c.stallCheck = c.SessionTimeout / 5
	}
	if c.partitionLags == nil {
		c.partitionLags = kafkaPartitionLags
	}
	if c.groupState == nil {
		c.groupState = kafkaGroupState
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// Stats are the consumer's counters since New.
type Stats struct {
	Messages     uint64 // fetched
	Batches      uint64 // committed
	Stored       uint64 // order rows inserted (status 0, unpaid; after in-batch dedupe)
	Paid         uint64 // paid rows inserted (status 1)
	Released     uint64 // release rows inserted (status 2: cancelled or expired)
	Duplicates   uint64 // events dropped in a batch as older copies of an order
	DeadLettered uint64
	InsertErrors uint64 // failed insert attempts (each was retried)
	CommitErrors uint64
	MarkErrors   uint64 // failed MarkSuccess calls (retried with the next batch)
	MarkPending  int64  // orders waiting for a MarkSuccess retry
	Rejoins      uint64 // times the consumer left and rejoined the group over a stalled partition
}

// Consumer is one member of the orders consumer group.
type Consumer struct {
	cfg    Config
	client *kafka.Client // the lag checks' and the dead-letter writer's
	// closeConns closes the idle connections of client.
	closeConns func()

	dlqReady bool
	dec      order.Decoder      // process's: a batch's orders share their product ids
	unmarked map[string][]int64 // stored orders whose MarkSuccess failed
	window   time.Duration      // the next batch's time (Run's goroutine only)

	messages, batches, stored, paid, released, dups, dead atomic.Uint64
	insertErrs, commitErrs, markErrs                      atomic.Uint64
	markPending                                           atomic.Int64
	// rejoin asks Run to leave and rejoin the group (the stall watch's
	// verdict); rejoins counts the times it did.
	rejoin  atomic.Bool
	rejoins atomic.Uint64
}

// maxUnmarked bounds the MarkSuccess retry backlog: beyond it the oldest
// are dropped (their orders are stored; shoppers see "pending" until the
// result endpoint falls back to the store).
const maxUnmarked = 100_000

// New checks the config; nothing connects before Run.
func New(cfg Config) (*Consumer, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	client, closeConns := cfg.Security.Client(cfg.Brokers, 10*time.Second)
	return &Consumer{
		cfg:        cfg,
		client:     client,
		closeConns: closeConns,
		unmarked:   map[string][]int64{},
	}, nil
}

// Stats returns the counters.
func (c *Consumer) Stats() Stats {
	return Stats{
		Messages: c.messages.Load(), Batches: c.batches.Load(), Stored: c.stored.Load(), Paid: c.paid.Load(),
		Released: c.released.Load(), Duplicates: c.dups.Load(), DeadLettered: c.dead.Load(),
		InsertErrors: c.insertErrs.Load(), CommitErrors: c.commitErrs.Load(),
		MarkErrors: c.markErrs.Load(), MarkPending: c.markPending.Load(), Rejoins: c.rejoins.Load(),
	}
}

// Run consumes until ctx is done, then leaves the group and returns nil.
// A batch in progress when ctx ends is not committed: it is delivered again
// to whoever consumes next, and storing it again is harmless.
func (c *Consumer) Run(ctx context.Context) error {
	newSource := c.cfg.newSource
	if newSource == nil {
		newSource = newKafkaGoSource
	}
	src, err := newSource(c)
	if err != nil {
		return err
	}
	defer c.closeConns()
	defer func() { // the current one: a rejoin replaces it
		if src != nil {
			src.close()
		}
	}()
	if c.cfg.StallAfter > 0 {
		wctx, stop := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			c.watchStalls(wctx)
		}()
		defer func() { stop(); <-watched }()
	}
	batch := make([]message, 0, c.cfg.BatchSize)
	for {
		if c.rejoin.Load() {
			// Between batches: everything fetched so far is committed.
			// Closing the reader leaves the group (a rebalance); the new
			// one joins as a new member.
			src.close()
			if src, err = newSource(c); err != nil {
				src = nil
				return err
			}
			c.rejoins.Add(1)
			c.rejoin.Store(false)
			c.cfg.Log.Info("orders consumer: left the group to rebalance it, joining again", "rejoins", c.rejoins.Load())
		}
		var err error
		batch, err = c.fetch(ctx, src, batch[:0])
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			c.cfg.Log.Warn("orders consumer: fetch", "err", err)
			if !sleep(ctx, c.cfg.MinBackoff) {
				return nil
			}
			continue
		}
		if len(batch) == 0 {
			c.retryMarks(ctx)
			continue
		}
		c.messages.Add(uint64(len(batch)))
		if !c.process(ctx, src, batch) {
			return nil
		}
	}
}

// fetch waits for a first message (at most a second, so that MarkSuccess
// retries run while idle), then collects more until BatchSize or the
// batch's time (fillTime: less the fetch's own wait).
//
// The batch time starts at BatchTime and doubles, up to BatchTimeMax, after
// every batch its timer closed with more than one message in it: events
// keep coming, so waiting longer makes fewer, larger inserts. ClickHouse
// pays per INSERT (each makes a part that merges rewrite), hardly per row:
// at ~2k orders/s, 50 ms batches were 20 inserts a second and merging them
// took 40-55 % of a core. A batch of one message, or a second without any,
// sets it back to BatchTime, so a quiet sale answers as fast as before. A
// batch BatchSize closed leaves it as it is.
func (c *Consumer) fetch(ctx context.Context, src source, batch []message) ([]message, error) {
	if c.window < c.cfg.BatchTime {
		c.window = c.cfg.BatchTime
	}
	wait, cancel := context.WithTimeout(ctx, time.Second)
	batch, err := src.poll(wait, batch, c.cfg.BatchSize)
	cancel()
	if len(batch) == 0 {
		if err == nil || errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			c.window = c.cfg.BatchTime
			return batch, nil
		}
		return batch, err
	}
	// Messages not taken when the deadline hits stay in the client's
	// buffer for the next batch.
	fill, cancel := context.WithTimeout(ctx, fillTime(c.window, src.fetchWait()))
	defer cancel()
	for len(batch) < c.cfg.BatchSize {
		n := len(batch)
		batch, err = src.poll(fill, batch, c.cfg.BatchSize-n)
		if ctx.Err() != nil {
			return batch, ctx.Err()
		}
		if fill.Err() != nil {
			break // batch time is up
		}
		if err != nil && len(batch) == n {
			break // the batch so far is good: the next fetch retries
		}
	}
	switch {
	case len(batch) == 1:
		c.window = c.cfg.BatchTime
	case len(batch) < c.cfg.BatchSize && c.cfg.BatchTimeMax > c.window:
		c.window = min(2*c.window, c.cfg.BatchTimeMax)
	}
	return batch, nil
}

// fillTime is how long a batch whose first message was just fetched
// collects more: its batch time, less what that message may have waited in
// the broker already (a waiting fetch: see waitBytes), so that an order of
// a quiet sale is stored within the batch time as when fetches returned at
// once — but at least a tenth of the batch time, to take the rest of the
// fetch that brought it (and the other partitions' fetches of the same
// moment) into the same batch.
func fillTime(window, fetchWait time.Duration) time.Duration {
	return max(window-fetchWait, window/10)
}

type rowKey struct {
	product string
	order   int64
}

// process handles one batch; false means ctx ended before it was committed.
func (c *Consumer) process(ctx context.Context, src source, batch []message) bool {
	rows := make([]orderstore.Row, 0, len(batch))
	index := make(map[rowKey]int, len(batch))
	var dead []message
	for i := range batch {
		m := &batch[i]
		ev, err := c.dec.Decode(m.Value)
		var row orderstore.Row
		if err == nil {
			row = orderstore.FromEvent(&ev)
			err = row.Validate()
		}
		if err != nil {
			c.cfg.Log.Warn("orders consumer: dead-lettering event", "partition", m.Partition, "offset", m.Offset, "err", err)
			dead = append(dead, deadLetter(m, err))
			continue
		}
		k := rowKey{row.ProductID, row.ID}
		if j, ok := index[k]; ok {
			c.dups.Add(1)
			if orderstore.Newer(&row, &rows[j]) {
				rows[j] = row
			}
			continue
		}
		index[k] = len(rows)
		rows = append(rows, row)
	}

	if !c.retry(ctx, "insert", func() error { return c.cfg.Store.Insert(ctx, rows) }, &c.insertErrs) {
		return false
	}
	if len(dead) > 0 {
		if !c.retry(ctx, "dead-letter", func() error { return c.writeDLQ(ctx, src, dead) }, nil) {
			return false
		}
		c.dead.Add(uint64(len(dead)))
	}
	stored := map[string][]int64{}
	for i := range rows {
		// Only an order event moves its order to success: a paid or a
		// release row is a settlement Redis made itself (and a settlement
		// that replaced its order in this batch means Redis is past
		// success already).
		switch rows[i].Status {
		case orderstore.StatusUnpaid:
			stored[rows[i].ProductID] = append(stored[rows[i].ProductID], rows[i].ID)
			c.stored.Add(1)
		case orderstore.StatusPaid:
			c.paid.Add(1)
		default:
			c.released.Add(1)
		}
	}
	// Marked before the commit: a process killed between the two then
	// gets the batch redelivered, stores it again (idempotent) and marks
	// it again (pending -> success only). Committed first, a kill there
	// left the orders stored but "pending" in Redis for good: nothing
	// would read them again.
	c.mark(ctx, stored)
	if err := src.commit(ctx, batch); err != nil {
		if ctx.Err() != nil {
			return false
		}
		// The rows are stored: a redelivery stores them again, harmlessly.
		c.commitErrs.Add(1)
		c.cfg.Log.Warn("orders consumer: commit", "err", err)
	} else {
		c.batches.Add(1)
	}

	if c.cfg.OnStored != nil && len(stored) > 0 {
		c.cfg.OnStored(stored)
	}
	return true
}

// deadLetter is m with why it could not be stored, for the dead-letter
// topic.
func deadLetter(m *message, err error) message {
	return message{
		Topic: m.Topic, Partition: m.Partition, Offset: m.Offset,
		Key: m.Key, Value: m.Value, Reason: err.Error(),
	}
}

func (c *Consumer) writeDLQ(ctx context.Context, src source, msgs []message) error {
	if !c.dlqReady {
		if err := broker.EnsureTopics(ctx, c.cfg.Brokers, c.cfg.Security, broker.Topic{
			Name: c.cfg.DLQTopic, Partitions: 1,
			ReplicationFactor: c.cfg.ReplicationFactor, MinInsyncReplicas: c.cfg.MinInsyncReplicas,
		}); err != nil {
			return err
		}
		c.dlqReady = true
	}
	return src.deadLetter(ctx, msgs)
}

// retry runs f until it succeeds, with capped exponential backoff; false
// means ctx ended first.
func (c *Consumer) retry(ctx context.Context, what string, f func() error, errs *atomic.Uint64) bool {
	backoff := c.cfg.MinBackoff
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil {
			if attempt > 1 {
				c.cfg.Log.Info("orders consumer: "+what+" recovered", "attempts", attempt)
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if errs != nil {
			errs.Add(1)
		}
		if attempt == 1 || attempt%10 == 0 {
			c.cfg.Log.Warn("orders consumer: "+what+" failed, retrying; nothing is committed meanwhile",
				"attempt", attempt, "backoff", backoff, "err", err)
		}
		if !sleep(ctx, backoff) {
			return false
		}
		backoff = min(backoff*2, c.cfg.MaxBackoff)
	}
}

// markChunk bounds the keys of one MarkSuccess script call.
const markChunk = 500

// mark moves stored orders (and earlier failures) to success in Redis.
func (c *Consumer) mark(ctx context.Context, stored map[string][]int64) {
	if c.cfg.Stock == nil {
		return
	}
	todo := make(map[string][]int64, len(stored)+len(c.unmarked))
	for p, ids := range stored {
		todo[p] = ids
	}
	for p, ids := range c.unmarked {
		todo[p] = append(ids, todo[p]...)
	}
	c.unmarked = map[string][]int64{}
	pending := 0
	for p, ids := range todo {
		for lo := 0; lo < len(ids); lo += markChunk {
			chunk := ids[lo:min(lo+markChunk, len(ids))]
			if _, err := c.cfg.Stock.MarkSuccess(ctx, p, chunk...); err != nil {
				c.markErrs.Add(1)
				c.cfg.Log.Warn("orders consumer: mark success failed, retrying with the next batch", "product", p, "orders", len(chunk), "err", err)
				if pending+len(chunk) <= maxUnmarked {
					c.unmarked[p] = append(c.unmarked[p], chunk...)
					pending += len(chunk)
				}
			}
		}
	}
	c.markPending.Store(int64(pending))
}

func (c *Consumer) retryMarks(ctx context.Context) {
	if len(c.unmarked) > 0 {
		c.mark(ctx, map[string][]int64{})
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
