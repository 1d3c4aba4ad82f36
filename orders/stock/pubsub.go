package stock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// The broadcasts (sold-out flags, order outcomes) and their subscriptions.
//
// On a standalone Redis each kind of broadcast is one keyless channel that
// every edge subscribes to. On Redis Cluster it is one sharded channel per
// product under the product's hash tag (see SoldOutChannelOf): SPUBLISH and
// SSUBSCRIBE go to the master of the product's slot, so when a master dies
// only its own products go quiet, and only until a replica is promoted.
// (Redis 7 keeps serving sharded pub/sub on the healthy masters while the
// cluster is down, cluster-allow-pubsubshard-when-down, its default.)
//
// A process holds one Redis subscription per channel however many callers
// subscribe (a fanout per kind): on a cluster the callers say which products
// they follow, and the fanout subscribes the union.

// followEvery is how often a subscription on Redis Cluster re-reads the
// products it follows (Subscription.Refollow re-reads them at once).
const followEvery = time.Second

// unsubscribeTimeout bounds the SUNSUBSCRIBE of a product's channel that
// nobody follows any more.
const unsubscribeTimeout = time.Second

// errSlotMoved is what Follow.Lost is told when the server ended a sharded
// subscription itself: the product's slot moved to another node.
var errSlotMoved = errors.New("stock: the server ended the subscription (the slot moved)")

// Sharded reports whether the broadcasts use sharded pub/sub, one channel
// per product: when the Store was opened on a Redis Cluster (rueidis found
// one at the address). A standalone server, one behind Sentinel and the
// embedded server (miniredis has no sharded pub/sub) use plain pub/sub.
func (s *Store) Sharded() bool { return s.c.Mode() == rueidis.ClientModeCluster }

// publishCmd is the command that broadcasts msg about product.
func (s *Store) publishCmd(k channelKind, product, msg string) rueidis.Completed {
	if s.Sharded() {
		return s.c.B().Spublish().Channel(k.of(product)).Message(msg).Build()
	}
	return s.c.B().Publish().Channel(k.keyless).Message(msg).Build()
}

// Follow says which products a subscription follows and what it is told
// besides the broadcasts.
type Follow struct {
	// Products lists the products whose broadcasts the subscriber wants.
	// On Redis Cluster, where each product has its own channel, the
	// subscription reads it when it starts, every second and on Refollow,
	// subscribes to the channels of the products that appeared and
	// unsubscribes those nobody follows any more: sales added at run time
	// are followed within a second. On a standalone Redis one channel
	// carries every product and Products is never called. It must be quick
	// and safe to call from any goroutine; nil follows nothing on a cluster.
	Products func() []string
	// Missed is called each time a channel of the subscription is
	// (re)established: the first time, after a reconnect, after a failover
	// moved a product's slot to another node, and when a product is newly
	// followed. Broadcasts published while a channel was not subscribed are
	// lost, so the subscriber then re-reads what they would have told it.
	// Calls run one at a time on a goroutine of the subscription;
	// (re)subscriptions confirmed while a call runs are merged into one
	// more call. ctx ends with Stop. nil: not told.
	Missed func(ctx context.Context)
	// Lost, if set, is told when an established channel breaks (product ""
	// on a standalone Redis): a connection lost, or the product's slot
	// moved. The subscription comes back by itself, and Missed is called
	// then. It runs on the subscription's receiving goroutine: be quick.
	Lost func(product string, err error)
}

// Subscription is one subscriber to a kind of broadcast; Stop ends it. Its
// message callback runs on the receiving goroutines, one call at a time
// (never concurrently with itself), must be quick — a slow one holds up the
// Redis connection it reads from — and must not call Stop. On a cluster
// it may also get messages of products that another subscriber to the
// same kind follows.
type Subscription struct {
	f       *fanout
	follow  Follow
	missed  chan struct{} // one pending Missed call at most
	cancel  context.CancelFunc
	done    chan struct{} // the Missed goroutine ended
	stopped chan struct{} // closed by Stop

	mu      sync.Mutex // serialises deliver; held by Stop to fence it off
	deliver func(msg string)
	off     bool

	products map[string]bool // followed now (cluster); guarded by f.mu
}

// fanout is the process's subscription to one kind of broadcast: the
// channels it is subscribed to and the subscribers it hands messages to.
// Its zero value is ready: subscribe fills it at the first subscriber.
type fanout struct {
	mu   sync.Mutex
	s    *Store
	kind channelKind
	subs map[*Subscription]bool
	// list is subs for the receiving goroutines and the connection's hooks,
	// which never take mu: a receiver is ended under mu and waited for
	// after it is released, and its hooks may run until it has ended.
	list atomic.Pointer[[]*Subscription]
	recv map[string]*receiver // by product; "" is the keyless channel
	// ending holds the receivers of products nobody follows any more,
	// which may still be unsubscribing: one started again for the same
	// product waits for it, or the old SUNSUBSCRIBE would end the new
	// subscription (Redis counts a channel once per connection).
	ending map[string]*receiver

	kick       chan struct{} // asks the follower to re-read Products now
	stopFollow context.CancelFunc
	followDone chan struct{}
}

// receiver is one channel's receiving goroutine.
type receiver struct {
	product string // "" for the keyless channel
	channel string
	prev    *receiver // the same channel's previous receiver, still ending
	cancel  context.CancelFunc
	done    chan struct{}
	ready   chan struct{} // closed at the first confirmation
	once    sync.Once
	up      atomic.Bool // confirmed and not broken since
}

// subscribe adds a subscriber to f, subscribing to the channels it needs,
// and waits, at most until ctx is done, until they are confirmed.
func (s *Store) subscribe(ctx context.Context, f *fanout, k channelKind, fol Follow, deliver func(string)) *Subscription {
	sub := &Subscription{f: f, follow: fol, deliver: deliver, missed: make(chan struct{}, 1),
		done: make(chan struct{}), stopped: make(chan struct{})}
	f.mu.Lock()
	if s.closed.Load() {
		f.mu.Unlock()
		sub.f = nil
		close(sub.done)
		close(sub.stopped)
		return sub
	}
	if f.subs == nil {
		f.s, f.kind, f.subs = s, k, map[*Subscription]bool{}
		f.recv, f.ending = map[string]*receiver{}, map[string]*receiver{}
		f.kick = make(chan struct{}, 1)
	}
	f.subs[sub] = true
	f.publishList()
	mctx, cancel := context.WithCancel(context.Background())
	sub.cancel = cancel
	go sub.missedLoop(mctx)
	var wait []*receiver
	if !s.Sharded() {
		r := f.recv[""]
		if r == nil {
			r = f.startLocked("")
		} else if r.up.Load() {
			sub.signalMissed() // joined late: what came before is missed
		}
		wait = append(wait, r)
		f.mu.Unlock()
	} else {
		if f.stopFollow == nil {
			fctx, stop := context.WithCancel(context.Background())
			f.stopFollow, f.followDone = stop, make(chan struct{})
			go f.followLoop(fctx, f.followDone)
		}
		f.mu.Unlock()
		var products []string
		if fol.Products != nil {
			products = fol.Products()
		}
		f.mu.Lock()
		if f.subs[sub] {
			wait = f.setProductsLocked(sub, products)
		}
		f.mu.Unlock()
	}
	for _, r := range wait {
		select {
		case <-r.ready:
		case <-r.done: // ended meanwhile (unfollowed, or the Store closed)
		case <-sub.stopped:
			return sub
		case <-ctx.Done():
			return sub // it keeps trying in the background
		}
	}
	return sub
}

// Refollow asks the subscription to re-read Follow.Products now rather
// than within a second (a no-op on a standalone Redis).
func (sub *Subscription) Refollow() {
	if sub.f == nil {
		return
	}
	select {
	case sub.f.kick <- struct{}{}:
	default: // one is pending; it will read the latest
	}
}

// Established reports whether every channel the subscription needs is
// subscribed now (true on a cluster while it follows no product).
func (sub *Subscription) Established() bool {
	f := sub.f
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.subs[sub] {
		return false
	}
	if !f.s.Sharded() {
		r := f.recv[""]
		return r != nil && r.up.Load()
	}
	for p := range sub.products {
		if r := f.recv[p]; r == nil || !r.up.Load() {
			return false
		}
	}
	return true
}

// Stop ends the subscription: once it returns no callback runs any more.
// The Redis subscriptions nobody needs any more are ended too. Safe to call
// more than once.
func (sub *Subscription) Stop() {
	f := sub.f
	if f == nil {
		return
	}
	var gone []*receiver
	var stopFollow context.CancelFunc
	var followDone chan struct{}
	f.mu.Lock()
	if f.subs[sub] {
		delete(f.subs, sub)
		f.publishList()
		sub.products = nil
		if len(f.subs) == 0 {
			gone = f.dropAllLocked()
			stopFollow, followDone = f.stopFollow, f.followDone
			f.stopFollow, f.followDone = nil, nil
		} else {
			gone = f.pruneLocked()
		}
	}
	f.mu.Unlock()
	sub.end()
	if stopFollow != nil {
		stopFollow()
		<-followDone
	}
	for _, r := range gone {
		<-r.done
	}
}

// end fences off the callbacks and waits for a Missed call in progress.
func (sub *Subscription) end() {
	sub.mu.Lock()
	if !sub.off {
		sub.off = true
		close(sub.stopped)
	}
	sub.mu.Unlock()
	sub.cancel()
	<-sub.done
}

func (sub *Subscription) signalMissed() {
	select {
	case sub.missed <- struct{}{}:
	default: // one is pending; it covers this one too
	}
}

func (sub *Subscription) missedLoop(ctx context.Context) {
	defer close(sub.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.missed:
			if sub.follow.Missed != nil {
				sub.follow.Missed(ctx)
			}
		}
	}
}

// onMessage hands a message to the subscriber unless it stopped.
func (sub *Subscription) onMessage(msg string) {
	sub.mu.Lock()
	if !sub.off {
		sub.deliver(msg)
	}
	sub.mu.Unlock()
}

func (f *fanout) publishList() {
	list := make([]*Subscription, 0, len(f.subs))
	for sub := range f.subs {
		list = append(list, sub)
	}
	f.list.Store(&list)
}

func (f *fanout) subscribers() []*Subscription {
	if l := f.list.Load(); l != nil {
		return *l
	}
	return nil
}

// setProductsLocked makes sub follow products (invalid ids are skipped:
// no channel can be named after them), starts the receivers that are
// missing, ends those nobody follows, and returns what to wait for: the
// receiver of every channel sub did not follow before.
func (f *fanout) setProductsLocked(sub *Subscription, products []string) (wait []*receiver) {
	next := make(map[string]bool, len(products))
	for _, p := range products {
		if checkProduct(p) == nil {
			next[p] = true
		}
	}
	for p := range next {
		if sub.products[p] {
			continue
		}
		r := f.recv[p]
		if r == nil {
			r = f.startLocked(p) // its confirmation tells sub
		} else if r.up.Load() {
			sub.signalMissed() // newly followed: what came before is missed
		}
		wait = append(wait, r)
	}
	sub.products = next
	f.pruneLocked() // they end in the background; nobody waits for them
	return wait
}

// pruneLocked ends the receivers of products no subscriber follows and
// returns them, to be waited for once mu is released.
func (f *fanout) pruneLocked() (gone []*receiver) {
	if !f.s.Sharded() {
		return nil
	}
	for p, r := range f.recv {
		followed := false
		for sub := range f.subs {
			if sub.products[p] {
				followed = true
				break
			}
		}
		if !followed {
			r.cancel()
			delete(f.recv, p)
			f.ending[p] = r
			gone = append(gone, r)
		}
	}
	return gone
}

func (f *fanout) dropAllLocked() (gone []*receiver) {
	for p, r := range f.recv {
		r.cancel()
		delete(f.recv, p)
		gone = append(gone, r)
	}
	for _, r := range f.ending {
		gone = append(gone, r)
	}
	clear(f.ending)
	return gone
}

// stop ends every subscriber and receiver (the Store is closing).
func (f *fanout) stop() {
	f.mu.Lock()
	subs := make([]*Subscription, 0, len(f.subs))
	for sub := range f.subs {
		subs = append(subs, sub)
		delete(f.subs, sub)
	}
	f.publishList()
	gone := f.dropAllLocked()
	stopFollow, followDone := f.stopFollow, f.followDone
	f.stopFollow, f.followDone = nil, nil
	f.mu.Unlock()
	for _, sub := range subs {
		sub.end()
	}
	if stopFollow != nil {
		stopFollow()
		<-followDone
	}
	for _, r := range gone {
		<-r.done
	}
}

// followLoop re-reads every subscriber's products every followEvery and
// on Refollow (cluster only).
func (f *fanout) followLoop(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(followEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.kick:
		}
		f.refollow()
	}
}

func (f *fanout) refollow() {
	subs := f.subscribers()
	want := make([][]string, len(subs))
	for i, sub := range subs {
		if sub.follow.Products != nil {
			want[i] = sub.follow.Products()
		}
	}
	f.mu.Lock()
	for i, sub := range subs {
		if f.subs[sub] {
			f.setProductsLocked(sub, want[i])
		}
	}
	f.mu.Unlock()
}

// startLocked starts the receiver of product's channel ("" the keyless one).
func (f *fanout) startLocked(product string) *receiver {
	r := &receiver{product: product, channel: f.kind.keyless, prev: f.ending[product],
		done: make(chan struct{}), ready: make(chan struct{})}
	delete(f.ending, product)
	if product != "" {
		r.channel = f.kind.of(product)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	f.recv[product] = r
	go f.receive(ctx, r)
	return r
}

// receive holds one channel's subscription until ctx ends, subscribing
// again whenever it breaks. rueidis retries a broken subscription itself
// (a reconnect, a MOVED after a failover); Receive returns when it gives
// up, or when the server ended a sharded subscription because the slot
// moved, and this loop then starts over.
func (f *fanout) receive(ctx context.Context, r *receiver) {
	defer close(r.done)
	if r.prev != nil {
		select {
		case <-r.prev.done:
		case <-ctx.Done():
			return
		}
		r.prev = nil
	}
	c := f.s.c
	hctx := rueidis.WithOnSubscriptionHook(ctx, func(ps rueidis.PubSubSubscription) {
		// On the connection's reading goroutine: signal, never wait.
		if ps.Kind != "subscribe" && ps.Kind != "ssubscribe" {
			return
		}
		r.up.Store(true)
		r.once.Do(func() { close(r.ready) })
		for _, sub := range f.subscribers() {
			sub.signalMissed()
		}
	})
	// Called each time the connection-level Receive returns, also between
	// rueidis' own retries: the moment the channel stops being subscribed.
	hctx = rueidis.WithOnReceiveReturnHook(hctx, func(err error, cc rueidis.CommandClient) error {
		if ctx.Err() != nil {
			if r.product != "" && r.up.Load() {
				// Nobody follows the product any more: without this
				// the server would keep sending its messages here.
				uctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
				_ = cc.Do(uctx, cc.B().Sunsubscribe().Channel(r.channel).Build()).Error()
				cancel()
			}
			r.up.Store(false)
			return err
		}
		if r.up.Swap(false) {
			why := err
			if why == nil {
				why = errSlotMoved
			}
			for _, sub := range f.subscribers() {
				if sub.follow.Lost != nil {
					sub.follow.Lost(r.product, why)
				}
			}
		}
		return err
	})
	onMessage := func(m rueidis.PubSubMessage) {
		for _, sub := range f.subscribers() {
			sub.onMessage(m.Message)
		}
	}
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		var cmd rueidis.Completed
		if r.product != "" {
			cmd = c.B().Ssubscribe().Channel(r.channel).Build()
		} else {
			cmd = c.B().Subscribe().Channel(r.channel).Build()
		}
		_ = c.Receive(hctx, cmd, onMessage)
		if time.Since(start) > 5*time.Second {
			backoff = 10 * time.Millisecond // it was up for a while: retry fast
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
			backoff = min(backoff*2, time.Second)
		}
		t.Stop()
	}
}

// stopSubscription ends every subscription (the Store is closing).
func (s *Store) stopSubscription() {
	s.soldOutSubs.stop()
	s.changesSubs.stop()
	s.routeRoomSubs.stop()
}
