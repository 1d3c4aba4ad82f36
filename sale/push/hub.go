package push

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"flashgate/metrics"
	"flashgate/orders/stock"
	"flashgate/sale/api"
)

// errSlow means the client's socket could not take an event at once.
var errSlow = errors.New("push: client is not reading")

const (
	numShards = 64 // power of two
	// maxInterned bounds the product-id table: ids come from requests, and
	// a flood of made-up ones must not grow it (they get their own copy).
	maxInterned = 1024
	// readChunk is how many order states one round trip reads.
	readChunk   = 256
	readTimeout = 2 * time.Second
)

// Hub is the event-stream side of one edge: one subscription, the waiting
// streams, their limits and timers. Create it with New, then Start.
type Hub struct {
	cfg       Config
	st        *stock.Store
	sub       *stock.Subscription
	log       *slog.Logger
	now       func() int64
	max       int64
	tickEvery time.Duration

	open   atomic.Int64
	closed atomic.Bool
	shards [numShards]shard
	users  [numShards]userShard
	seed   maphash.Seed

	names   atomic.Pointer[map[string]string]
	namesMu sync.Mutex
	// followed is the products whose outcomes the subscription follows
	// (on Redis Cluster each has its own channel): those a stream has
	// waited for since Start. Streams wait only for real orders, so it
	// grows with the sales, not with what requests make up.
	followed   atomic.Pointer[map[string]bool]
	followedMu sync.Mutex

	stop context.CancelFunc
	wg   sync.WaitGroup

	// Scratch of the message dispatch (one message at a time).
	dispMu   sync.Mutex
	dispList []*Stream
	dispBuf  []byte
	// Scratch of the ticker.
	tickMu            sync.Mutex
	tickAll, tickExp  []*Stream
	tickBuf           []byte
	tickStates        []state
	pushes, deadlines metrics.Counter
	dropsSlow         metrics.Counter
	dropsGone         metrics.Counter
	rejEdge, rejUser  metrics.Counter
	resyncs, badMsgs  metrics.Counter
}

type shard struct {
	mu sync.Mutex
	// m chains the streams waiting for one order id through Stream.next
	// (a shopper may watch one order from several tabs).
	m map[int64]*Stream
	_ [40]byte // keep neighbouring shards' locks off one cache line
}

type userShard struct {
	mu sync.Mutex
	m  map[string][]*Stream
	_  [40]byte
}

// Stats are the hub's counters.
type Stats struct {
	Open      int64  // streams open now (including those being opened)
	Pushes    uint64 // outcomes written to a waiting stream
	Deadlines uint64 // streams that reached their deadline still pending
	DropsSlow uint64 // clients dropped because they did not read
	DropsGone uint64 // clients found gone (closed or reset) on a write or probe
	// RejectedEdge and RejectedUser count streams refused by the limits.
	RejectedEdge, RejectedUser uint64
	Resyncs                    uint64 // state re-reads after (re)subscribing
	BadMessages                uint64 // malformed messages on the channel
	// Subscribed: the outcome subscription is established (on Redis
	// Cluster, the channel of every product the hub follows).
	Subscribed bool
}

// New returns a hub reading order states and subscribing to order
// outcomes through st. Nothing runs before Start.
func New(st *stock.Store, cfg Config) (*Hub, error) {
	// A zero setting takes conf's default (max_streams' zero is its own:
	// automatic); a negative one is refused.
	cfg.EventsConfig = cfg.EventsConfig.WithDefaults()
	if ev := cfg.EventsConfig; ev.MaxStreams < 0 || ev.MaxPerUser < 0 || ev.Heartbeat < 0 || ev.Deadline < 0 || ev.WriteTimeout < 0 {
		return nil, fmt.Errorf("push: events.max_streams, max_per_user, heartbeat, deadline and write_timeout must not be negative, got %d, %d, %v, %v, %v",
			ev.MaxStreams, ev.MaxPerUser, ev.Heartbeat, ev.Deadline, ev.WriteTimeout)
	}
	if cfg.Render == nil {
		return nil, errors.New("push: Config.Render is required (sale.AppendResult)")
	}
	if st == nil {
		return nil, errors.New("push: no stock store")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixNano() }
	}
	h := &Hub{cfg: cfg, st: st, log: cfg.Log, now: cfg.Now, seed: maphash.MakeSeed()}
	h.max = int64(cfg.MaxStreams)
	if h.max <= 0 {
		h.max = int64(autoMaxStreams())
	}
	// Heartbeats and deadlines are checked a few times per period, so
	// neither is late by more than a quarter of it.
	h.tickEvery = min(max(min(cfg.Heartbeat, cfg.Deadline)/4, 5*time.Millisecond), time.Second)
	for i := range h.shards {
		h.shards[i].m = map[int64]*Stream{}
		h.users[i].m = map[string][]*Stream{}
	}
	empty := map[string]string{}
	h.names.Store(&empty)
	none := map[string]bool{}
	h.followed.Store(&none)
	return h, nil
}

// MaxStreams is the per-edge limit in force.
func (h *Hub) MaxStreams() int { return int(h.max) }

// Start subscribes and starts the ticker. It waits, at most until ctx is
// done, for the subscription to be confirmed; if ctx ends first the hub
// keeps trying in the background (streams still end at their deadline).
func (h *Hub) Start(ctx context.Context) {
	rctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	h.sub = h.st.SubscribeChanges(ctx, stock.Follow{
		Products: h.followedProducts,
		// Messages published while a channel was not subscribed are lost:
		// read the state of every stream we hold.
		Missed: h.resync,
		Lost: func(product string, err error) {
			h.log.Warn("event push subscription lost; resubscribing", "product", product, "err", err)
		},
	}, h.onSettled, h.onMalformed)
	h.wg.Add(1)
	go func() { defer h.wg.Done(); h.tickLoop(rctx) }()
}

// Close unsubscribes and closes every stream (the pages fall back to
// polling). Call it before closing the stock store.
func (h *Hub) Close() {
	if h.closed.Swap(true) {
		return
	}
	if h.stop != nil {
		h.sub.Stop()
		h.stop()
		h.wg.Wait()
	}
	for _, s := range h.collect(nil) {
		s.shutdown()
	}
}

// Open reserves a stream for a signed-in shopper's order, before the order
// is read, so that an outcome published while it is read is not missed.
// It copies what it keeps. The caller must then either Serve the stream or
// Abort it. A rejection is the answer to give (429 at a limit).
func (h *Hub) Open(productID []byte, orderID int64, userID []byte) (*Stream, *api.Rejection) {
	if h.closed.Load() {
		return nil, api.StreamsClosing
	}
	if h.open.Add(1) > h.max {
		h.open.Add(-1)
		h.rejEdge.Inc()
		return nil, api.StreamsFull
	}
	s := &Stream{h: h, product: h.intern(productID), user: string(userID), order: orderID,
		endAt: h.now() + int64(h.cfg.Deadline)}
	if !h.addUser(s) {
		h.open.Add(-1)
		h.rejUser.Inc()
		return nil, api.ShopperStreamsFull
	}
	sh := h.shard(orderID)
	sh.mu.Lock()
	s.next = sh.m[orderID]
	sh.m[orderID] = s
	sh.mu.Unlock()
	if h.closed.Load() {
		// Close collected the streams before this one was added.
		s.Abort()
		return nil, api.StreamsClosing
	}
	return s, nil
}

// Stats returns the counters.
func (h *Hub) Stats() Stats {
	return Stats{
		Open: h.open.Load(), Pushes: h.pushes.Value(), Deadlines: h.deadlines.Value(),
		DropsSlow: h.dropsSlow.Value(), DropsGone: h.dropsGone.Value(),
		RejectedEdge: h.rejEdge.Value(), RejectedUser: h.rejUser.Value(),
		Resyncs: h.resyncs.Value(), BadMessages: h.badMsgs.Value(), Subscribed: h.subscribedNow(),
	}
}

// RegisterMetrics exports the hub's counters.
func (h *Hub) RegisterMetrics(reg *metrics.Registry) {
	reg.Register("flashgate_events_streams", "Event streams open on this edge.", "gauge", func(w *metrics.Writer) {
		w.Value(float64(h.open.Load()))
	})
	reg.Register("flashgate_events_pushes_total", "Order outcomes written to waiting event streams.", "counter", func(w *metrics.Writer) {
		w.Value(float64(h.pushes.Value()))
	})
	reg.Register("flashgate_events_deadlines_total", "Event streams that reached their deadline still pending.", "counter", func(w *metrics.Writer) {
		w.Value(float64(h.deadlines.Value()))
	})
	reg.Register("flashgate_events_drops_total", "Event streams dropped: the client did not read (slow) or had gone.", "counter", func(w *metrics.Writer) {
		w.Value(float64(h.dropsSlow.Value()), metrics.Label{Name: "reason", Value: "slow"})
		w.Value(float64(h.dropsGone.Value()), metrics.Label{Name: "reason", Value: "gone"})
	})
	reg.Register("flashgate_events_rejected_total", "Event streams refused by a limit.", "counter", func(w *metrics.Writer) {
		w.Value(float64(h.rejEdge.Value()), metrics.Label{Name: "limit", Value: "edge"})
		w.Value(float64(h.rejUser.Value()), metrics.Label{Name: "limit", Value: "user"})
	})
	reg.Register("flashgate_events_resyncs_total", "Order states of all streams re-read after the subscription was (re)established.", "counter", func(w *metrics.Writer) {
		w.Value(float64(h.resyncs.Value()))
	})
	reg.Register("flashgate_events_subscribed", "1 while the outcome subscription is established.", "gauge", func(w *metrics.Writer) {
		v := 0.0
		if h.subscribedNow() {
			v = 1
		}
		w.Value(v)
	})
}

func (h *Hub) shard(orderID int64) *shard {
	// The low bits of an id are a per-millisecond sequence: mix first.
	return &h.shards[(uint64(orderID)*0x9E3779B97F4A7C15)>>58]
}

func (h *Hub) userShard(user string) *userShard {
	return &h.users[maphash.String(h.seed, user)&(numShards-1)]
}

// intern returns the shared copy of a product id, so that streams of one
// product share one string and the dispatch compares pointers.
func (h *Hub) intern(b []byte) string {
	if s, ok := (*h.names.Load())[string(b)]; ok {
		return s
	}
	h.namesMu.Lock()
	defer h.namesMu.Unlock()
	cur := *h.names.Load()
	if s, ok := cur[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(cur) >= maxInterned {
		return s
	}
	next := make(map[string]string, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[s] = s
	h.names.Store(&next)
	return s
}

// addUser counts s against its shopper's limit. A shopper at the limit
// whose older streams belong to closed pages (the page was reloaded, or it
// gave up and polls) gets those reclaimed: a closed socket is only noticed
// on a write otherwise, up to a heartbeat later.
func (h *Hub) addUser(s *Stream) bool {
	us := h.userShard(s.user)
	us.mu.Lock()
	list := us.m[s.user]
	if len(list) < h.cfg.MaxPerUser {
		us.m[s.user] = append(list, s)
		us.mu.Unlock()
		return true
	}
	var dead []*Stream
	for _, o := range list {
		if o.gone() {
			dead = append(dead, o)
		}
	}
	us.mu.Unlock()
	if len(dead) == 0 {
		return false
	}
	for _, o := range dead {
		o.drop(errGone)
	}
	us.mu.Lock()
	defer us.mu.Unlock()
	list = us.m[s.user]
	if len(list) >= h.cfg.MaxPerUser {
		return false
	}
	us.m[s.user] = append(list, s)
	return true
}

// unregister removes s from the tables; called once, by whoever closed it.
func (h *Hub) unregister(s *Stream) {
	sh := h.shard(s.order)
	sh.mu.Lock()
	if p := sh.m[s.order]; p == s {
		if s.next == nil {
			delete(sh.m, s.order)
		} else {
			sh.m[s.order] = s.next
		}
	} else {
		for p != nil && p.next != s {
			p = p.next
		}
		if p != nil {
			p.next = s.next
		}
	}
	s.next = nil
	sh.mu.Unlock()

	us := h.userShard(s.user)
	us.mu.Lock()
	list := us.m[s.user]
	if i := slices.Index(list, s); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(us.m, s.user)
	} else {
		us.m[s.user] = list
	}
	us.mu.Unlock()
	h.open.Add(-1)
}

// collect appends every registered stream to dst.
func (h *Hub) collect(dst []*Stream) []*Stream {
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		for _, s := range sh.m {
			for ; s != nil; s = s.next {
				dst = append(dst, s)
			}
		}
		sh.mu.Unlock()
	}
	return dst
}

// send writes b to the stream's connection without waiting for the client:
// a non-blocking send where the platform allows, else a short deadline.
func (h *Hub) send(s *Stream, b []byte) error {
	if s.rc != nil {
		return trySend(s.rc, b)
	}
	if err := s.conn.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout)); err != nil {
		return err
	}
	if _, err := s.conn.Write(b); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return errSlow
		}
		return err
	}
	return nil
}

func (h *Hub) countDrop(err error) {
	if errors.Is(err, errSlow) {
		h.dropsSlow.Inc()
	} else {
		h.dropsGone.Inc()
	}
}

// ---- subscription ----

// subscribedNow reports whether the outcome subscription is established
// (on a cluster: the channel of every followed product).
func (h *Hub) subscribedNow() bool { return h.sub != nil && h.sub.Established() }

// follow makes the subscription follow product's outcomes, once a stream
// waits for one of its orders. Until its channel is confirmed a message
// may be missed; the confirmation calls resync, which reads the state of
// every stream, this one included.
func (h *Hub) follow(product string) {
	if (*h.followed.Load())[product] {
		return
	}
	h.followedMu.Lock()
	cur := *h.followed.Load()
	if cur[product] {
		h.followedMu.Unlock()
		return
	}
	next := make(map[string]bool, len(cur)+1)
	for p := range cur {
		next[p] = true
	}
	next[product] = true
	h.followed.Store(&next)
	h.followedMu.Unlock()
	if h.sub != nil {
		h.sub.Refollow()
	}
}

func (h *Hub) followedProducts() []string {
	m := *h.followed.Load()
	out := make([]string, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	return out
}

func (h *Hub) onMalformed(msg string) {
	h.badMsgs.Inc()
	h.log.Warn("malformed message on the event channel", "channel", stock.ChangesChannel, "len", len(msg))
}

// onSettled writes the outcome to every stream waiting for an order of the
// message. It runs on a receiving goroutine of the subscription, one
// message at a time; writes never wait.
func (h *Hub) onSettled(m stock.StateChange) {
	h.dispMu.Lock()
	defer h.dispMu.Unlock()
	st := parseState(m.Kind.State())
	list := h.dispList[:0]
	for _, id := range m.OrderIDs {
		sh := h.shard(id)
		sh.mu.Lock()
		for s := sh.m[id]; s != nil; s = s.next {
			if s.product == m.ProductID {
				list = append(list, s)
			}
		}
		sh.mu.Unlock()
	}
	for _, s := range list {
		h.dispBuf = s.deliver(st, h.dispBuf)
	}
	clear(list) // do not keep closed streams reachable
	h.dispList = list[:0]
}

// resync reads the order state of every stream and settles the decided.
// It runs on the subscription's goroutine (Follow.Missed).
func (h *Hub) resync(ctx context.Context) {
	all := h.collect(nil)
	if len(all) == 0 {
		return
	}
	h.resyncs.Inc()
	var buf []byte
	states := make([]state, 0, readChunk)
	for lo := 0; lo < len(all) && ctx.Err() == nil; lo += readChunk {
		chunk := all[lo:min(lo+readChunk, len(all))]
		states = h.readStates(ctx, chunk, states[:0])
		for i, s := range chunk {
			if states[i] != statePending {
				buf = s.deliver(states[i], buf)
			}
		}
	}
	h.log.Info("event streams resynchronised after (re)subscribing", "streams", len(all))
}

// readStates reads the order state of each stream, pending where unknown
// (a read error, or a key that is gone).
func (h *Hub) readStates(ctx context.Context, list []*Stream, dst []state) []state {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	refs := make([]stock.OrderRef, len(list))
	for i, s := range list {
		refs[i] = stock.OrderRef{ProductID: s.product, ID: s.order}
	}
	for _, v := range h.st.OrderStates(ctx, refs, make([]string, 0, len(refs))) {
		dst = append(dst, parseState(v))
	}
	return dst
}

// ---- heartbeats and deadlines ----

func (h *Hub) tickLoop(ctx context.Context) {
	t := time.NewTicker(h.tickEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.tick(ctx, h.now())
		}
	}
}

// tick sends due heartbeats and ends streams past their deadline. One
// goroutine for all streams: a goroutine or a timer per stream would cost
// more than the stream itself.
func (h *Hub) tick(ctx context.Context, now int64) {
	h.tickMu.Lock()
	defer h.tickMu.Unlock()
	all := h.collect(h.tickAll[:0])
	expired := h.tickExp[:0]
	for _, s := range all {
		if now >= s.endAt {
			expired = append(expired, s)
			continue
		}
		h.tickBuf = s.heartbeat(now, h.tickBuf)
	}
	for lo := 0; lo < len(expired); lo += readChunk {
		chunk := expired[lo:min(lo+readChunk, len(expired))]
		h.tickStates = h.readStates(ctx, chunk, h.tickStates[:0])
		for i, s := range chunk {
			h.tickBuf = s.expire(h.tickStates[i], h.tickBuf)
		}
	}
	clear(all)
	clear(expired)
	h.tickAll, h.tickExp = all[:0], expired[:0]
}
