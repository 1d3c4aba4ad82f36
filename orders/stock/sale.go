package stock

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"flashgate/orders/order"
)

var (
	//go:embed lua/warm.lua
	warmLua string
	//go:embed lua/restock.lua
	restockLua string
	//go:embed lua/mark_success.lua
	markSuccessLua string
	//go:embed lua/reschedule.lua
	rescheduleLua string
	//go:embed lua/order_result.lua
	orderResultLua string

	warmScript        = rueidis.NewLuaScript(warmLua)
	restockScript     = rueidis.NewLuaScript(restockLua)
	markSuccessScript = rueidis.NewLuaScript(orderFnLua + markSuccessLua)
	rescheduleScript  = rueidis.NewLuaScript(rescheduleLua)
	orderResultScript = rueidis.NewLuaScript(orderResultLua)
)

// SaleStock is what warm-up writes for one product.
type SaleStock struct {
	ProductID string
	// Stock is the remaining stock to open the sale with: the configured
	// stock for a new sale; after Redis lost its memory, what the ledger
	// says is left (initial + restocked + released - sold).
	Stock int64
	// Initial, Restocked and Released are the reconciliation counters
	// (Initial 0 means Stock). They are only written when the stock key
	// is created. Released counts every unit a cancel or the pay deadline
	// gave back.
	Initial, Restocked, Released int64
	// Paid is the units paid in time, Expired the units of Released that
	// the pay deadline gave back (the settle script counts both; a rebuild
	// raises them to the ledger's). Warm does not write them.
	Paid, Expired  int64
	Limit          int
	Price          int64 // cents
	StartMs, EndMs int64
}

// SaleInfo is a sale's meta as stored, with its remaining stock.
type SaleInfo struct {
	SaleStock
	Remaining int64
	// Fence is set while the sale is closed for a ledger rebuild (see
	// Fence), also when the stock key is missing; "" when it is open.
	Fence string
	// TokensFromMs is the meta's token horizon: the deduction refuses a
	// purchase token expiring at or before it (a rebuild or a settled
	// orphan raised it, RebuildPlan.TokensFromMs); 0 when none.
	TokensFromMs int64
}

// Warm opens a sale: it writes the meta and creates the stock key only if
// it does not exist. It never raises (or lowers) the stock of a live sale —
// an edge restarting and warming again with the configured stock would
// otherwise oversell. created reports whether the stock key was created;
// on false only the schedule (limit, price, start, end) was updated.
func (s *Store) Warm(ctx context.Context, sale SaleStock) (created bool, err error) {
	if sale.Stock < 0 || sale.Initial < 0 || sale.Restocked < 0 || sale.Released < 0 {
		return false, fmt.Errorf("%w: sale %+v", ErrInvalid, sale)
	}
	return s.runSaleScript(ctx, warmScript, "warm", sale)
}

// runSaleScript runs warm or reschedule, which take the same keys and
// arguments (stock, meta; the sale's figures and schedule, the buyer layout
// of a new sale, which reschedule ignores) and answer 1 or 0.
func (s *Store) runSaleScript(ctx context.Context, script *rueidis.Lua, what string, sale SaleStock) (bool, error) {
	if !order.ValidProductID(sale.ProductID) || sale.Limit < 1 || sale.Price < 0 {
		return false, fmt.Errorf("%w: sale %+v", ErrInvalid, sale)
	}
	initial := sale.Initial
	if initial == 0 {
		initial = sale.Stock
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	n, err := script.Exec(ctx, s.c,
		[]string{StockKey(sale.ProductID), MetaKey(sale.ProductID)},
		[]string{i64(sale.Stock), i64(initial), i64(sale.Restocked), i64(sale.Released),
			strconv.Itoa(sale.Limit), i64(sale.Price), i64(sale.StartMs), i64(sale.EndMs), s.fenceArg(), s.buyersArg, s.ledgerArg},
	).AsInt64()
	if err != nil {
		return false, fmt.Errorf("stock: %s %s: %w", what, sale.ProductID, err)
	}
	return n == 1, nil
}

// Restock adds units to a live sale and records them in the meta
// (restocked) for reconciliation. It fails with ErrNotWarmed rather than
// create a stock key.
func (s *Store) Restock(ctx context.Context, productID string, add int64) (newStock int64, err error) {
	if !order.ValidProductID(productID) || add <= 0 {
		return 0, fmt.Errorf("%w: restock %q by %d", ErrInvalid, productID, add)
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	n, err := restockScript.Exec(ctx, s.c, []string{StockKey(productID), MetaKey(productID)}, []string{i64(add)}).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, fmt.Errorf("stock: restock %s: %w", productID, ErrNotWarmed)
	}
	if err != nil {
		return 0, fmt.Errorf("stock: restock %s: %w", productID, err)
	}
	return n, nil
}

// Order states. pending and success hold the order's units; the others
// are final (settle.go moves an order out of pending or success once).
const (
	StatePending  = "pending"  // deducted; its event on the way to the store
	StateSuccess  = "success"  // stored; unpaid (its deadline, if any, in the due set)
	StatePaid     = "paid"     // paid in time: kept for good
	StateExpired  = "expired"  // released by the pay deadline
	StateReleased = "released" // released by a cancel
	StateFailed   = "failed"   // the deduction never happened (ResolveUnknown)
)

// OrderInfo is an order as the scripts wrote it: the order, its state
// (State*) and, once settled, when (Redis' clock, unix ms).
type OrderInfo struct {
	order.Order
	State    string
	PaidMs   int64 // when it was paid; 0 unless StatePaid
	ClosedMs int64 // when it was paid, expired or released; 0 while it holds units
}

// orderInfo reads an older edge's order hash (HGETALL as a map; the string
// layout is parseOrderValue's).
func orderInfo(productID string, orderID int64, m map[string]string) OrderInfo {
	num := func(k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
	o := OrderInfo{Order: order.Order{ID: orderID, ProductID: productID, UserID: m["user"]}, State: m["state"]}
	o.Qty = int(num("qty"))
	o.PriceCents = num("price")
	o.CreatedMs = num("created")
	o.Edge = int(num("node"))
	o.PayByMs = num("payby")
	o.PaidMs = num("paid")
	o.ClosedMs = num("closed")
	return o
}

// OrderState reads an order; ok is false when it does not exist (never
// deducted, expired, or lost with Redis' memory).
func (s *Store) OrderState(ctx context.Context, productID string, orderID int64) (OrderInfo, bool, error) {
	if err := checkProduct(productID); err != nil {
		return OrderInfo{}, false, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	o, ok, err := s.readOrder(ctx, productID, orderID)
	if err != nil {
		return OrderInfo{}, false, fmt.Errorf("stock: order %s/%d: %w", productID, orderID, err)
	}
	return o, ok, nil
}

// VerifyTrust is how long a verification of the server a sale lives on
// (its run id, lua/order_result.lua) is trusted by ResultState: an INFO per
// product per this at most, instead of one per poll. A server that went
// back in time holds a stamp at least as old as the last write it got from
// the server it replaces, and nobody reads from it before a failover's node
// timeout or a restart's downtime has passed: seconds, not this.
const VerifyTrust = 100 * time.Millisecond

// ResultState is OrderState for what the shopper is answered (result,
// events): verified is false when the order is pending or success and this
// Redis may hold an older copy of it than one a shopper was shown — the
// sale is fenced (its order states are the rebuild's to correct), or this
// server is not the one the sale was verified on (a replica promoted, a
// restart from a snapshot: the call then fences the sale with fence, as a
// deduction would). A final state (paid, expired, released, failed) is
// always verified: none of them follows another.
//
// One script call per poll, where OrderState pipelines two plain reads:
// measured here with redis-benchmark (shared 2-core VM, noisy), ~4 µs of
// Redis for a final order and ~6 µs for an undecided one, against ~2 µs;
// the INFO of a verification (~17 µs) at most once per VerifyTrust per
// sale. An older edge's order hash costs the reads of OrderState after it.
func (s *Store) ResultState(ctx context.Context, productID string, orderID int64, fence string) (o OrderInfo, ok, verified bool, err error) {
	if err := checkProduct(productID); err != nil {
		return OrderInfo{}, false, false, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	res, err := orderResultScript.Exec(ctx, s.c,
		[]string{OrderKey(productID, orderID), OrderBucketKey(productID, orderID), MetaKey(productID)},
		[]string{i64(orderID), s.fenceArg(), fence, i64(VerifyTrust.Milliseconds())}).ToArray()
	switch {
	case rueidis.IsRedisNil(err):
		return OrderInfo{}, false, false, nil
	case err != nil:
		return OrderInfo{}, false, false, fmt.Errorf("stock: order %s/%d: %w", productID, orderID, err)
	case len(res) != 2:
		return OrderInfo{}, false, false, fmt.Errorf("stock: order %s/%d: %d values from order_result.lua", productID, orderID, len(res))
	}
	flag, err1 := res[0].AsInt64()
	v, err2 := res[1].ToString()
	if err := cmp.Or(err1, err2); err != nil {
		return OrderInfo{}, false, false, fmt.Errorf("stock: order %s/%d: %w", productID, orderID, err)
	}
	if v == "" {
		// An older edge's hash (a rolling upgrade): read it whole.
		if o, ok, err = s.readOrder(ctx, productID, orderID); err != nil {
			return OrderInfo{}, false, false, fmt.Errorf("stock: order %s/%d: %w", productID, orderID, err)
		}
	} else {
		o, ok = parseOrderValue(productID, orderID, v)
	}
	return o, ok, ok && flag == 1, nil
}

// OrderRef names one order.
type OrderRef struct {
	ProductID string
	ID        int64
}

// OrderStates reads the state of each order (State*; for each its bucket
// field and its key's GET pipelined in one round trip, bounded by ctx
// alone, and an HGET of state in a second one for the orders an older edge
// wrote as hashes) and appends them to dst in refs' order: "" where it is
// unknown (no such order, or its read failed).
func (s *Store) OrderStates(ctx context.Context, refs []OrderRef, dst []string) []string {
	cmds := make(rueidis.Commands, 0, 2*len(refs))
	for _, r := range refs {
		cmds = append(cmds, s.c.B().Hget().Key(OrderBucketKey(r.ProductID, r.ID)).Field(i64(r.ID)).Build(),
			s.c.B().Get().Key(OrderKey(r.ProductID, r.ID)).Build())
	}
	base := len(dst)
	var hashes []int
	res := s.c.DoMulti(ctx, cmds...)
	for i := range refs {
		if v, err := res[2*i].ToString(); err == nil {
			dst = append(dst, stateOfValue(v))
			continue
		}
		v, err := res[2*i+1].ToString()
		if isWrongType(err) {
			hashes = append(hashes, i)
		}
		dst = append(dst, stateOfValue(v))
	}
	if len(hashes) == 0 {
		return dst
	}
	cmds = cmds[:0]
	for _, i := range hashes {
		cmds = append(cmds, s.c.B().Hget().Key(OrderKey(refs[i].ProductID, refs[i].ID)).Field("state").Build())
	}
	for j, r := range s.c.DoMulti(ctx, cmds...) {
		dst[base+hashes[j]], _ = r.ToString()
	}
	return dst
}

// MarkSuccess moves orders of one product from pending to success (the
// consumer stored them). Other states are left alone, so it is idempotent
// and never resurrects a released order. An order with a pay deadline
// enters the due set (DueKey) as it becomes success: its deadline is swept
// from then on (ExpireDue). It returns how many changed.
func (s *Store) MarkSuccess(ctx context.Context, productID string, orderIDs ...int64) (int, error) {
	if err := checkProduct(productID); err != nil {
		return 0, err
	}
	if len(orderIDs) == 0 {
		return 0, nil
	}
	total := 0
	for lo := 0; lo < len(orderIDs); lo += markSuccessChunk {
		chunk := orderIDs[lo:min(lo+markSuccessChunk, len(orderIDs))]
		keys, args := markSuccessCall(productID, chunk)
		cctx, cancel := s.call(ctx)
		n, err := markSuccessScript.Exec(cctx, s.c, keys, args).AsInt64()
		cancel()
		if err != nil {
			return total, fmt.Errorf("stock: mark success %s: %w", productID, err)
		}
		total += int(n)
	}
	return total, nil
}

// markSuccessCall is mark_success.lua's KEYS and ARGV for ids: the due
// set and the order bucket hashes they fall in; the order keys' prefix,
// then each id and its bucket's position.
func markSuccessCall(productID string, ids []int64) (keys, args []string) {
	keys = make([]string, 1, 3)
	keys[0] = DueKey(productID)
	args = make([]string, 2, 2*len(ids)+2)
	args[1] = orderKeyPrefix(productID)
	// The ids' text in one string, each argument a slice of it: one
	// allocation a call, not one an order (the consumer marks every order).
	text := make([]byte, 0, 19*len(ids))
	for _, id := range ids {
		text = strconv.AppendInt(text, id, 10)
	}
	all, at := string(text), 0
	var buckets []int64
	for _, id := range ids {
		m := OrderBucket(id)
		j := slices.Index(buckets, m)
		if j < 0 {
			j = len(buckets)
			buckets = append(buckets, m)
			keys = append(keys, OrderBucketKey(productID, id))
		}
		var digits [20]byte
		n := len(strconv.AppendInt(digits[:0], id, 10))
		args = append(args, all[at:at+n], strconv.Itoa(j+1))
		at += n
	}
	args[0] = strconv.Itoa(len(buckets))
	return keys, args
}

// markSuccessChunk bounds the orders of one mark_success.lua call: its one
// ZADD unpacks two arguments per order onto Lua's stack (8,000 slots).
const markSuccessChunk = 1000

// Remaining is the product's stock; ok is false when the sale is not warmed.
func (s *Store) Remaining(ctx context.Context, productID string) (n int64, ok bool, err error) {
	if err := checkProduct(productID); err != nil {
		return 0, false, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	n, err = s.c.Do(ctx, s.c.B().Get().Key(StockKey(productID)).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("stock: remaining %s: %w", productID, err)
	}
	return n, true, nil
}

// Bought is how many units the user bought in the sale (0 if none). Both
// buyer layouts are read, in one round trip: a sale has one of them, so
// the other adds nothing.
func (s *Store) Bought(ctx context.Context, productID, userID string) (int64, error) {
	if !order.ValidProductID(productID) || !order.ValidUserID(userID) {
		return 0, fmt.Errorf("%w: bought %q/%q", ErrInvalid, productID, userID)
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	res := s.c.DoMulti(ctx,
		s.c.B().Get().Key(BuyerKey(productID, userID)).Build(),
		s.c.B().Hget().Key(BuyerShardKey(productID, BuyerShard(userID))).Field(userID).Build())
	var total int64
	for _, r := range res {
		n, err := r.AsInt64()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("stock: bought %s/%s: %w", productID, userID, err)
		}
		total += n
	}
	return total, nil
}

// SaleInfo reads a sale's meta and remaining stock; ok is false when the
// sale is not warmed (no stock key).
func (s *Store) SaleInfo(ctx context.Context, productID string) (SaleInfo, bool, error) {
	if err := checkProduct(productID); err != nil {
		return SaleInfo{}, false, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	res := s.c.DoMulti(ctx,
		s.c.B().Get().Key(StockKey(productID)).Build(),
		s.c.B().Hgetall().Key(MetaKey(productID)).Build())
	rem, err := res[0].AsInt64()
	missing := rueidis.IsRedisNil(err)
	if err != nil && !missing {
		return SaleInfo{}, false, fmt.Errorf("stock: sale %s: %w", productID, err)
	}
	m, err := res[1].AsStrMap()
	if err != nil {
		return SaleInfo{}, false, fmt.Errorf("stock: sale %s: %w", productID, err)
	}
	if missing {
		return SaleInfo{Fence: m[fieldFence]}, false, nil
	}
	num := func(k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
	info := SaleInfo{Remaining: rem, Fence: m[fieldFence], TokensFromMs: num(fieldTokens), SaleStock: SaleStock{
		ProductID: productID, Stock: rem, Initial: num("initial"), Restocked: num("restocked"),
		Released: num("released"), Paid: num("paid"), Expired: num("expired"),
		Limit: int(num("limit")), Price: num("price"), StartMs: num("start"), EndMs: num("end"),
	}}
	return info, true, nil
}

func i64(n int64) string { return strconv.FormatInt(n, 10) }

// Reschedule updates a live sale's limit, price, start and end, like Warm on
// a live sale, but never creates the stock key: live is false when it is
// missing (a new sale, or one Redis lost), and nothing was written.
func (s *Store) Reschedule(ctx context.Context, sale SaleStock) (live bool, err error) {
	return s.runSaleScript(ctx, rescheduleScript, "reschedule", sale)
}

// Meta reads a sale's meta hash whether or not its stock key exists; ok is
// false when there is none. A meta without a stock key is a sale that was
// open and lost its stock key (the embedded server drops stock keys after a
// crash, see Open): its Initial and Restocked are what the rebuild starts
// from. Stock is 0.
func (s *Store) Meta(ctx context.Context, productID string) (SaleStock, bool, error) {
	if err := checkProduct(productID); err != nil {
		return SaleStock{}, false, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	m, err := s.c.Do(ctx, s.c.B().Hgetall().Key(MetaKey(productID)).Build()).AsStrMap()
	if err != nil {
		return SaleStock{}, false, fmt.Errorf("stock: meta %s: %w", productID, err)
	}
	if len(m) == 0 {
		return SaleStock{}, false, nil
	}
	num := func(k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
	return SaleStock{
		ProductID: productID, Initial: num("initial"), Restocked: num("restocked"),
		Released: num("released"), Paid: num("paid"), Expired: num("expired"),
		Limit: int(num("limit")), Price: num("price"), StartMs: num("start"), EndMs: num("end"),
	}, true, nil
}
