package stock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/redis/rueidis"

	"flashgate/orders/order"
)

//go:embed lua/deduct.lua
var deductLua string

var deductScript = rueidis.NewLuaScript(deductLua)

// deductSHA is the script's SHA1, for EVALSHA outside rueidis.Lua (execWait).
var deductSHA = func() string { h := sha1.Sum([]byte(deductLua)); return hex.EncodeToString(h[:]) }()

// ErrCallFailed is wrapped, together with ErrUnknown (timeout, connection
// error, Redis error) or ErrNotSent (a dial that failed: nothing was
// written), by the error of exactly one attempt of each failed deduction
// script call: a circuit breaker counts those, one per call, rather than
// one per attempt the call carried.
var ErrCallFailed = errors.New("stock: script call failed")

// Code is the answer to one purchase attempt.
type Code uint8

const (
	OK           Code = iota // deducted; order pending, outbox entry written
	SoldOut                  // not enough stock left for the quantity
	LimitReached             // bought + qty would exceed the user's limit
	BadToken                 // the purchase token was already used
	NotReady                 // the sale is not warmed: closed until it is
	Recovering               // Redis went back in time: closed on every edge until rebuilt
)

var codeNames = [...]string{"OK", "SOLD_OUT", "LIMIT_REACHED", "BAD_TOKEN", "NOT_READY", "RECOVERING"}

// String is the code as the shopper API spells it.
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "Code(" + strconv.Itoa(int(c)) + ")"
}

// Attempt is one shopper's purchase attempt, already authenticated and
// checked by the sale (token valid, quantity within the limit): the order
// it would make (its CreatedMs is the edge's clock now; the whole order is
// recorded in the order hash and the outbox entry) and what only the
// deduction checks. The deduction still enforces the limit and the token's
// single use exactly.
type Attempt struct {
	order.Order
	Limit int // per-user limit for the sale, >= 1
	// TokenNonceHex identifies the one-time purchase token; it is marked
	// used by a successful deduction until TokenExpiresMs.
	TokenNonceHex  string
	TokenExpiresMs int64
}

// Deduct copies what it needs from an Attempt: its strings may be views of
// buffers the caller reuses once Deduct has returned.

// Outcome is the script's answer for one attempt. Remaining is the product's
// stock after the batch the attempt was part of, or -1 when unknown (sale not
// warmed, or decided without asking Redis).
type Outcome struct {
	Code      Code
	Remaining int64
	// OutboxID is the id of the outbox stream entry ("<ms>-<seq>") that a
	// successful deduction wrote, "" for any other code. In ledger "b" the
	// entry carries every order of its script call, and the id is
	// "<ms>-<seq>/<orders>": AckOutbox removes the entry once it was given
	// the id that many times. Once Kafka has
	// acknowledged the order event, the edge removes the entry with
	// AckOutbox; an entry left behind is re-sent by the outbox relay.
	OutboxID string
}

// product is the per-product coalescer plus its pre-built keys.
type product struct {
	id string
	productKeys
	mu          sync.Mutex
	inFlight    int     // script calls for this product in flight
	maxInFlight int     // inFlightPerProduct; tests may pin it
	pending     []*call // queued behind it, FIFO
}

func (s *Store) product(id string) *product {
	if p := (*s.products.Load())[id]; p != nil {
		return p
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	old := *s.products.Load()
	if p := old[id]; p != nil {
		return p
	}
	// Copy on write: products are few and long-lived, lookups are on every
	// attempt and must neither lock nor allocate.
	m := make(map[string]*product, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	// Cloned: the caller's string may be a view of a request buffer.
	id = strings.Clone(id)
	p := &product{id: id, productKeys: keysOf(id), maxInFlight: inFlightPerProduct}
	m[id] = p
	s.products.Store(&m)
	return p
}

// inFlightPerProduct is how many deduction script calls per product may be
// in flight at once. Each script is atomic, so any number keeps the sale's
// promises (rueidis pipelines the calls on one connection, Redis runs them
// in order), and the code and tests work for any value. Two measured
// faster in BenchmarkDeductBurst, where Redis has a core of its own (2,000
// goroutines, one product: 104-110k -> 115-119k attempts/s; 64: 83-86k ->
// 103-106k), but not at the edge: the burst scenario's do p99.9 was
// 442-521 ms with two against 350-441 ms with one (3 alternating runs,
// GOMAXPROCS=1): smaller batches, more calls, and the edge's one P is the
// limit. So one.
const inFlightPerProduct = 1

// call is one attempt's slot in a batch. Pooled together with its channel:
// each use sends exactly one value on done, which its owner receives.
type call struct {
	a        Attempt
	deadline int64 // unix ns; the attempt is not sent after it
	out      Outcome
	err      error
	lead     *batch // set when the receiver must run this batch
	done     chan struct{}
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// batch is one script call's worth of attempts and its arguments.
type batch struct {
	calls []*call // calls[0] belongs to the goroutine running the batch
	send  []*call // calls still within their budget
	buf   []byte  // bytes of the per-attempt keys and numbers
	spans []span
	keys  []string
	args  []string
	// buckets are the token expiry buckets of the attempts sent, one per
	// used-token hash the call names (in that order); obuckets their order
	// buckets (OrderBucket), one per order bucket hash.
	buckets, obuckets []int64
}

type span struct{ lo, hi int32 }

var batchPool = sync.Pool{New: func() any { return new(batch) }}

// spansPerAttempt: user qty limit orderId value now tokenTTL nonce pos,
// deduct.lua's nine strings per attempt in its lean call.
const spansPerAttempt = 9

// Deduct runs one attempt through the product's group commit: while a
// script call for the product is in flight (inFlightPerProduct), further
// attempts queue; when it returns, the queued ones (up to
// Options.MaxBatch) go as the next single call. No timer is involved, so
// coalescing adds at most one round trip of latency, and under load Redis
// runs one script per batch instead of one per attempt. Each attempt keeps
// its own checks (evaluated in queue order, so a user's second attempt
// sees the first one's count) and its own answer.
//
// An error wrapping ErrUnknown (timeout, connection reset, a script error:
// see callError) means the script may or may not have run for every
// attempt of that batch. The caller answers 503 and lets the ledger settle
// it (ResolveUnknown decides one attempt): if the deduction
// happened, its outbox entry exists and becomes an order. Never retry a
// deduction blindly. Exactly one attempt of a failed call also gets
// ErrCallFailed, so that a circuit breaker counts calls, not attempts.
// ErrNotSent (also a refused dial), ErrInvalid and ErrClosed mean nothing
// was sent.
//
// Budget: an attempt waits in the queue for at most Options.QueueTimeout
// (or until ctx's deadline, if earlier) and is then dropped unsent
// (ErrNotSent); the script call that carries it has a full Timeout of its
// own from when it is sent. The worst case is QueueTimeout + Timeout. An
// attempt is not answered at its own deadline while its call is in
// flight: it waits for the call's answer or the call's budget.
func (s *Store) Deduct(ctx context.Context, a Attempt) (Outcome, error) {
	if out, err, done := s.precheck(ctx, &a); done {
		return out, err
	}
	p := s.product(a.ProductID)
	c := newCall(ctx, &a, s.opts.QueueTimeout)
	p.mu.Lock()
	if p.inFlight >= p.maxInFlight {
		p.pending = append(p.pending, c)
		p.mu.Unlock()
		<-c.done
		if b := c.lead; b != nil {
			c.lead = nil
			s.lead(p, b)
		}
	} else {
		p.inFlight++
		p.mu.Unlock()
		b := batchPool.Get().(*batch)
		b.calls = append(b.calls[:0], c)
		s.lead(p, b)
	}
	return c.release()
}

// Stats counts deduction script calls and the attempts they carried since
// Open; attempts/calls is the average group-commit batch size.
func (s *Store) Stats() (calls, attempts uint64) {
	return s.nCalls.Load(), s.nAttempts.Load()
}

var unknownOutcome = Outcome{Remaining: -1}

// precheck refuses what must not reach the script: nothing is sent once
// the store is closed or the caller gave up, and an invalid attempt is not
// sent, lest it fail the whole batch it would join. A token already
// expired is invalid here: its used-token mark would have no lifetime, a
// SET PX the script cannot run.
func (s *Store) precheck(ctx context.Context, a *Attempt) (Outcome, error, bool) {
	if s.closed.Load() {
		return unknownOutcome, ErrClosed, true
	}
	if err := a.Validate(); err != nil {
		return unknownOutcome, fmt.Errorf("%w: %w", ErrInvalid, err), true
	}
	if !validNonce(a.TokenNonceHex) || a.Limit < 1 || a.TokenExpiresMs <= a.CreatedMs {
		return unknownOutcome, fmt.Errorf("%w: attempt %+v", ErrInvalid, *a), true
	}
	if err := ctx.Err(); err != nil {
		return unknownOutcome, fmt.Errorf("%w: %w", ErrNotSent, err), true
	}
	return Outcome{}, nil, false
}

func newCall(ctx context.Context, a *Attempt, budget time.Duration) *call {
	c := callPool.Get().(*call)
	c.a = *a
	c.deadline = time.Now().Add(budget).UnixNano()
	if dl, ok := ctx.Deadline(); ok && dl.UnixNano() < c.deadline {
		c.deadline = dl.UnixNano()
	}
	return c
}

func (c *call) release() (Outcome, error) {
	out, err := c.out, c.err
	*c = call{done: c.done}
	callPool.Put(c)
	return out, err
}

// lead runs batch b for p, then hands the product to the next batch (if
// attempts queued meanwhile) before waking b's waiters, so the next script
// call starts as early as possible.
func (s *Store) lead(p *product, b *batch) {
	s.exec(p, b)
	var next *batch
	p.mu.Lock()
	if n := min(len(p.pending), s.opts.MaxBatch); n > 0 {
		next = batchPool.Get().(*batch)
		next.calls = append(next.calls[:0], p.pending[:n]...)
		m := copy(p.pending, p.pending[n:])
		clear(p.pending[m:])
		p.pending = p.pending[:m]
	} else {
		p.inFlight--
	}
	p.mu.Unlock()
	for _, c := range b.calls[1:] {
		c.done <- struct{}{} // c belongs to its waiter from here on
	}
	// The next batch's leader is woken last, on purpose: a goroutine woken
	// by a channel send goes to its P's runnext slot and runs as soon as
	// this one blocks, and every later wake-up pushes the previous one to
	// the tail of the run queue. Woken first, the leader would queue
	// behind its batch's 100+ waiters and, under a burst, behind every
	// other runnable goroutine of the edge, delaying the product's next
	// script call. (Measured on the burst scenario, 3 alternating runs
	// each: do p99.9 336-414 ms woken last, 346-450 ms woken first; within
	// this machine's noise, so the ordering is kept for the reason, not
	// for a proven gain.)
	if next != nil {
		first := next.calls[0]
		first.lead = next
		first.done <- struct{}{}
	}
	b.recycle()
}

func (b *batch) recycle() {
	clear(b.calls)
	clear(b.send)
	clear(b.keys)
	clear(b.args)
	b.calls, b.send, b.keys, b.args = b.calls[:0], b.send[:0], b.keys[:0], b.args[:0]
	batchPool.Put(b)
}

// exec sends b's attempts as one script call and fills in every call's
// outcome or error.
//
// The call gets a full Options.Timeout from now, whatever its attempts
// waited in the queue: inheriting the oldest attempt's remaining budget
// made a burst's big batches time out after a few milliseconds although
// Redis answers in one. An attempt whose queue budget (QueueTimeout) ran
// out is not sent. So an attempt is answered within QueueTimeout + Timeout.
func (s *Store) exec(p *product, b *batch) {
	now := time.Now()
	b.send = b.send[:0]
	for _, c := range b.calls {
		if c.deadline <= now.UnixNano() {
			// Waited out its budget behind a slow call: not sent, so the
			// outcome is known (nothing happened).
			c.out, c.err = unknownOutcome, ErrNotSent
			continue
		}
		b.send = append(b.send, c)
	}
	if len(b.send) == 0 {
		return
	}
	b.build(p, s)
	s.nCalls.Add(1)
	s.nAttempts.Add(uint64(len(b.send)))
	ctx := newBudget(now.Add(s.opts.Timeout))
	var resp rueidis.RedisResult
	if s.opts.WaitReplicas > 0 {
		resp = s.execWait(ctx, b)
	} else {
		resp = deductScript.Exec(ctx, s.c, b.keys, b.args)
	}
	ctx.end()
	if err := s.parse(b, resp); err != nil {
		if resp.NonRedisError() != nil {
			// rueidis may still write the command later (it does not
			// recycle it either): the strings point into b.buf, so
			// the buffer must never be reused.
			b.buf = nil
		}
		for _, c := range b.send {
			c.out, c.err = unknownOutcome, err
		}
		// One failed call is one piece of evidence about Redis, however
		// many attempts it carried: only its first attempt says so.
		b.send[0].err = fmt.Errorf("%w: %w", ErrCallFailed, err)
	}
}

// parse reads the lean call's answer, {remaining, codes, ids...} (lua/deduct.lua).
func (s *Store) parse(b *batch, resp rueidis.RedisResult) error {
	arr, err := resp.ToArray()
	if err != nil {
		return callError(err)
	}
	return parseAnswers(b, arr)
}

// parseAnswers fills in b's outcomes from the lean call's answer.
func parseAnswers(b *batch, arr []rueidis.RedisMessage) error {
	if len(arr) < 2 {
		return fmt.Errorf("%w: deduct script returned %d values", ErrUnknown, len(arr))
	}
	rem, err := arr[0].AsInt64()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnknown, err)
	}
	// The codes, one digit per attempt, or 0 when every attempt succeeded
	// (an integer: no string for rueidis to read).
	var codes string
	oks := len(b.send)
	all := int64(-1)
	if arr[1].IsInt64() {
		all, _ = arr[1].AsInt64()
	}
	if all != 0 {
		codes, err = arr[1].ToString()
		if err != nil || len(codes) != len(b.send) {
			return fmt.Errorf("%w: deduct script codes %q for %d attempts (%v)", ErrUnknown, codes, len(b.send), err)
		}
		oks = strings.Count(codes, "0")
	}
	ids := arr[2:]
	if len(ids) != oks && (oks == 0 || len(ids) != 1) {
		// One id per successful attempt, or one shared by all of them.
		return fmt.Errorf("%w: deduct script returned %d ids for %d successes", ErrUnknown, len(ids), oks)
	}
	j := 0
	for i, c := range b.send {
		code := OK
		if codes != "" {
			code = Code(codes[i] - '0')
			if code >= Code(len(codeNames)) {
				return fmt.Errorf("%w: deduct script code %q", ErrUnknown, codes[i])
			}
		}
		if code != OK {
			c.out = Outcome{Code: code, Remaining: rem}
			continue
		}
		// ToString hands out the reply's own string; the only allocation
		// is rueidis' read.
		id, err := ids[j].ToString()
		if err != nil {
			return fmt.Errorf("%w: deduct script id: %w", ErrUnknown, err)
		}
		if len(ids) > 1 {
			j++
		}
		c.out = Outcome{Code: OK, Remaining: rem, OutboxID: id}
	}
	return nil
}

// callError classifies the error of a script call that got no reply, or
// a Redis error instead of one.
//
// Not sent (ErrNotSent), although Redis did fail: a dial that failed
// (connection refused, no route to the host, a name that does not resolve,
// a dial timeout) wrote nothing — the client dials before it writes, and a
// command on a connection that broke gets that connection's error, never a
// later dial's; a cluster slot with no node to send to (rueidis.ErrNoSlot);
// and the Redis errors a server answers before it runs a command at all
// (CLUSTERDOWN while a failover is under way, TRYAGAIN, LOADING, a MOVED or
// ASK the client did not follow).
//
// Anything else may have come after the script ran (ErrUnknown): a timeout,
// a connection reset or closed after the write, an error the script itself
// raised.
func callError(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" || errors.Is(err, rueidis.ErrNoSlot) {
		return notSent{err}
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		_, moved := re.IsMoved()
		_, ask := re.IsAsk()
		if re.IsClusterDown() || re.IsTryAgain() || re.IsLoading() || moved || ask {
			return notSent{err}
		}
	}
	return fmt.Errorf("%w: %w", ErrUnknown, err)
}

// notSent is a call refused before the script ran. Its message says so
// rather than ErrNotSent's, which names the common case (a budget spent in
// the queue).
type notSent struct{ err error }

func (e notSent) Error() string   { return "stock: not sent, Redis refused the call: " + e.err.Error() }
func (e notSent) Unwrap() []error { return []error{ErrNotSent, e.err} }

// build lays out KEYS and ARGV for deduct.lua's lean call. Each attempt's
// strings are appended to one buffer and sliced into strings without
// copying; the strings are only made after the last append, so the buffer
// cannot move under them. Nothing of the caller's Attempt is referenced by
// the command, which rueidis may still hold after a timeout.
//
// Redis pays for every string of a call (docs/ledger.md, "What a purchase
// costs Redis"), so an attempt sends nine and no key: what is constant per
// call goes once (the per-key names' prefixes, from which the script names
// a per-key sale's keys; the product's 16 buyer hashes, built once per
// product), the order's value and outbox record go made (value), and the
// attempt's buyer hash, token hash and order bucket go as one number (pos).
// The batch's used-token hashes (one per token expiry bucket) and order
// buckets are named in the buffer too, so that no call allocates once the
// buffers have grown.
func (b *batch) build(p *product, s *Store) {
	b.buf, b.spans, b.buckets, b.obuckets = b.buf[:0], b.spans[:0], b.buckets[:0], b.obuckets[:0]
	for _, c := range b.send {
		a := &c.a
		m := a.TokenExpiresMs / tokenBucketMs
		t := slices.Index(b.buckets, m)
		if t < 0 {
			t = len(b.buckets)
			b.buckets = append(b.buckets, m)
		}
		m = OrderBucket(a.ID)
		o := slices.Index(b.obuckets, m)
		if o < 0 {
			o = len(b.obuckets)
			b.obuckets = append(b.obuckets, m)
		}
	}
	nt := len(b.buckets)
	for _, c := range b.send {
		a := &c.a
		b.str("", "", a.UserID)
		b.num("", "", int64(a.Qty))
		b.num("", "", int64(a.Limit))
		b.num("", "", a.ID)
		b.orderValue(a)
		b.num("", "", a.CreatedMs)
		b.num("", "", a.TokenExpiresMs-a.CreatedMs)
		b.str("", "", a.TokenNonceHex)
		t := slices.Index(b.buckets, a.TokenExpiresMs/tokenBucketMs)
		o := slices.Index(b.obuckets, OrderBucket(a.ID))
		b.num("", "", int64(BuyerShard(a.UserID)+BuyerShards*t+BuyerShards*nt*o))
	}
	for _, m := range b.buckets {
		b.tokenBucketKey(p, m)
	}
	for _, m := range b.obuckets {
		b.orderBucketKey(p, m)
	}
	ttl, now := s.opts.OrderTTL.Milliseconds(), time.Now().UnixMilli()
	for _, m := range b.obuckets {
		b.num("", "", orderBucketExpireAtMs(m, now, ttl))
	}
	b.num("", "", int64(nt))
	b.num("", "", int64(len(b.obuckets)))
	n := len(b.send)
	tail := b.spans[n*spansPerAttempt:] // token buckets, order buckets, their expiries, T, B
	no := len(b.obuckets)
	b.keys = append(b.keys[:0], p.stockKey, p.outboxKey, p.metaKey)
	b.keys = append(b.keys, p.shardKeys...)
	for _, sp := range tail[:nt+no] {
		b.keys = append(b.keys, b.s(sp))
	}
	b.args = append(b.args[:0], p.id, s.graceMs, s.orderTTLMs, s.fenceArg(), s.layoutArg, p.buyerPre, p.orderPre, p.tokenPre,
		b.s(tail[nt+2*no]), b.s(tail[nt+2*no+1]))
	for _, sp := range tail[nt+no : nt+2*no] {
		b.args = append(b.args, b.s(sp))
	}
	for _, sp := range b.spans[:n*spansPerAttempt] {
		b.args = append(b.args, b.s(sp))
	}
}

// orderValue appends a's order value as deduct.lua stores it after its
// state byte, "<user>:<qty>:<price>:<created>:<node>:<payby>" (keys.go,
// "sk:{p}:o:"), as one span.
func (b *batch) orderValue(a *Attempt) {
	lo := len(b.buf)
	b.buf = append(append(b.buf, a.UserID...), ':')
	b.buf = append(strconv.AppendInt(b.buf, int64(a.Qty), 10), ':')
	b.buf = append(strconv.AppendInt(b.buf, a.PriceCents, 10), ':')
	b.buf = append(strconv.AppendInt(b.buf, a.CreatedMs, 10), ':')
	b.buf = append(strconv.AppendInt(b.buf, int64(a.Edge), 10), ':')
	b.buf = strconv.AppendInt(b.buf, a.PayByMs, 10)
	b.spans = append(b.spans, span{int32(lo), int32(len(b.buf))})
}

// execWait runs the deduction script and then WAIT on one dedicated
// connection: WAIT counts the replicas that have this connection's writes,
// so it must follow the script on the same one (on a cluster, the product's
// master: the dedicated client binds to the first command's slot). The
// script's reply is what counts; a WAIT that timed out or failed is only
// counted, as the purchases are already made and their events go to Kafka.
func (s *Store) execWait(ctx context.Context, b *batch) rueidis.RedisResult {
	var resp rueidis.RedisResult
	_ = s.c.Dedicated(func(dc rueidis.DedicatedClient) error {
		evalsha := dc.B().Evalsha().Sha1(deductSHA).Numkeys(int64(len(b.keys))).Key(b.keys...).Arg(b.args...).Build()
		wait := dc.B().Wait().Numreplicas(int64(s.opts.WaitReplicas)).Timeout(s.opts.WaitTimeout.Milliseconds()).Build()
		res := dc.DoMulti(ctx, evalsha, wait)
		if err := res[0].Error(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			// Not loaded on this server yet (a new or restarted one): the
			// script did not run, so sending it whole is safe.
			eval := dc.B().Eval().Script(deductLua).Numkeys(int64(len(b.keys))).Key(b.keys...).Arg(b.args...).Build()
			wait = dc.B().Wait().Numreplicas(int64(s.opts.WaitReplicas)).Timeout(s.opts.WaitTimeout.Milliseconds()).Build()
			res = dc.DoMulti(ctx, eval, wait)
		}
		resp = res[0]
		s.nWaits.Add(1)
		if n, err := res[1].AsInt64(); err != nil || n < int64(s.opts.WaitReplicas) {
			s.nWaitsShort.Add(1)
		}
		return nil
	})
	return resp
}

// WaitStats counts the WAITs sent after deduction script calls and those
// that returned before WaitReplicas replicas acknowledged (or failed).
func (s *Store) WaitStats() (waits, short uint64) { return s.nWaits.Load(), s.nWaitsShort.Load() }

// fenceArg tells the scripts whether to check the server's run id (see
// lua/deduct.lua): a real Redis has one, the embedded server does not, and
// it cannot go back in time without its only edge restarting with it.
func (s *Store) fenceArg() string {
	if s.mini != nil {
		return "0"
	}
	return "1"
}

func (b *batch) str(p1, p2, v string) {
	lo := len(b.buf)
	b.buf = append(append(append(b.buf, p1...), p2...), v...)
	b.spans = append(b.spans, span{int32(lo), int32(len(b.buf))})
}

func (b *batch) num(p1, p2 string, v int64) {
	lo := len(b.buf)
	b.buf = strconv.AppendInt(append(append(b.buf, p1...), p2...), v, 10)
	b.spans = append(b.spans, span{int32(lo), int32(len(b.buf))})
}

func (b *batch) s(sp span) string {
	return unsafe.String(&b.buf[sp.lo], int(sp.hi-sp.lo))
}

// ScriptAttempt is one attempt as deduct.lua receives it, each field the
// text sent: a tool that calls the script without a Store may put
// placeholders in them (bench's redis-benchmark peer sends __rand_int__,
// its OpenResty peer Lua expressions).
type ScriptAttempt struct {
	User, Qty, Limit, OrderID, PriceCents string
	// NowMs is the attempt's creation time (unix ms), TokenTTLMs how long
	// its token lives after it, PayByMs its pay deadline ("0": none).
	NowMs, TokenTTLMs, PayByMs string
	Node, TokenNonce           string
}

// DeductCall is deduct.lua's KEYS and ARGV for attempts of one product in
// the call's older shape, the one without the buyer hashes: it serves a
// sale of the per-key layout (Options.BuyerKeys) and writes orders as
// strings. fence is the fenceArg ("1": check the server's run id).
// Store.Deduct sends the same keys and arguments around the buyer hashes'
// (TestDeductCallIsWhatDeductSends holds the two together).
func DeductCall(product, buyerGraceMs, orderTTLMs, fence string, attempts ...ScriptAttempt) (keys, args []string) {
	keys = []string{StockKey(product), OutboxKey(product), MetaKey(product)}
	args = []string{product, buyerGraceMs, orderTTLMs, fence}
	for _, a := range attempts {
		keys = append(keys, BuyerKey(product, a.User), orderKeyPrefix(product)+a.OrderID, TokenKey(product, a.TokenNonce))
		args = append(args, a.User, a.Qty, a.Limit, a.OrderID, a.PriceCents, a.NowMs, a.TokenTTLMs, a.Node, a.PayByMs)
	}
	return keys, args
}
