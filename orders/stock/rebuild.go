package stock

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"flashgate/orders/order"
)

// The ledger rebuild: reopening a fenced sale (Redis lost its memory or
// went back in time, see fence.go) from the order ledger. Package sale reads
// the ledger and computes a Rebuild; this file reads what survived in Redis
// and writes the result, in an order that never lets a purchase see stock
// without its buyers' counts (see Rebuild).

var (
	//go:embed lua/set_buyers.lua
	setBuyersLua string
	//go:embed lua/fix_orders.lua
	fixOrdersLua string
	//go:embed lua/reopen.lua
	reopenLua string

	setBuyersScript = rueidis.NewLuaScript(setBuyersLua)
	fixOrdersScript = rueidis.NewLuaScript(orderFnLua + fixOrdersLua)
	reopenScript    = rueidis.NewLuaScript(reopenLua)
)

// rebuildChunk bounds the keys of one rebuild script call: a script blocks
// Redis for everyone while it runs.
const rebuildChunk = 500

// SurvivingOrders lists the order hashes of a product with their states,
// embedded server only: after a crash it restores them from a snapshot
// that may predate changes the ledger knows (a release, a success). A real
// Redis that lost its memory has none, and listing keys there would mean a
// SCAN of every node: it returns nil.
func (s *Store) SurvivingOrders(ctx context.Context, productID string) (map[int64]string, error) {
	if err := checkProduct(productID); err != nil {
		return nil, err
	}
	if s.mini == nil {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pre, bpre := orderKeyPrefix(productID), orderBucketKeyPrefix(productID)
	out := map[int64]string{}
	for _, k := range s.mini.Keys() {
		if strings.HasPrefix(k, bpre) && s.mini.Type(k) == "hash" { // ledger "b"
			fields, _ := s.mini.HKeys(k)
			for _, f := range fields {
				id, err := strconv.ParseInt(f, 10, 64)
				if st := stateOfValue(s.mini.HGet(k, f)); err == nil && st != "" {
					out[id] = st
				}
			}
			continue
		}
		if !strings.HasPrefix(k, pre) {
			continue
		}
		id, err := strconv.ParseInt(k[len(pre):], 10, 64)
		if err != nil {
			continue
		}
		switch s.mini.Type(k) {
		case "string": // this version's layout
			if v, err := s.mini.Get(k); err == nil && stateOfValue(v) != "" {
				out[id] = stateOfValue(v)
			}
		case "hash": // an older version's
			out[id] = s.mini.HGet(k, "state")
		}
	}
	return out, nil
}

// Rebuild is what the ledger says a fenced sale must reopen with.
type Rebuild struct {
	// SaleStock: Stock is what is left (Initial + Restocked - units held; below
	// 0 while overdue unpaid orders are counted as held, see
	// lua/reopen.lua), and Initial, Restocked, Released, Paid and Expired
	// are raised in the meta for reconcile, as computed (Initial is not
	// defaulted to Stock here).
	SaleStock
	// Fence is the fence the rebuild lifts (see Fence): every write is
	// guarded by it.
	Fence string
	// Buyers is the units each user holds: their stored orders (unpaid and
	// paid) plus their orders still on the way (outbox), less the releases
	// still on the way. Every user it names gets exactly that count, raised
	// or lowered (0: the key goes), and so does every user of a Settled
	// order it does not name (0): a Redis back from an old snapshot holds
	// the units of orders released since in its counts, and an edge would
	// refuse such a shopper at her limit although she holds nothing.
	Buyers map[string]int64
	// Orders are the orders whose hash the rebuild writes: each takes the
	// ledger's state (State, PaidMs, ClosedMs, PayByMs) if it survived, and
	// is made again whole if it was lost (living OrderTTL from the rebuild).
	// An order in StateSuccess (or StatePending) with PayByMs > 0 enters the
	// due set, also when its deadline passed; any other leaves it. The
	// sale gives every stored order young enough to have a hash and every
	// unpaid one with a deadline; orders it leaves out are left alone.
	Orders []OrderInfo
	// Settled, if set, pages through every order the ledger knows as
	// settled (StatePaid, StateReleased, StateExpired), by id: after is the
	// last id of the page before (0 first), and an empty page ends it. A
	// Redis restored from an old snapshot may hold any of them as pending
	// or success — also one without a deadline, which neither the due set
	// nor the outbox names — and a cancel or a sweep would then release it
	// a second time. Each of their hashes that exists takes the ledger's
	// state and leaves the due set; one that is gone stays gone (a settle
	// call finds no order). They are written before Orders, which may know
	// newer settlements (the outbox's).
	Settled func(ctx context.Context, after int64) ([]OrderInfo, error)
	// TokensFromMs refuses purchase tokens expiring at or before it: the
	// marks of tokens used in the lost window may be gone.
	TokensFromMs int64
	// NowMs is the clock for the buyers' expiry and the orders' age
	// (default: now).
	NowMs int64
}

// Reopened is what Rebuild did to the stock key.
type Reopened struct {
	Before int64 // the stock Redis held (-1: the key was missing)
	After  int64 // the stock now: min(Before, the ledger's), or the ledger's
}

// Rebuild reopens a fenced sale from the ledger. The writes go in this
// order, each call guarded by the fence (r.Fence):
//
//  1. the surviving hashes of the settled orders (r.Settled, page by page)
//     take their ledger state, then r.Orders' hashes theirs, lost ones
//     made again, and the unpaid orders' deadlines go back into the due
//     set (lua/fix_orders.lua, in chunks);
//  2. every buyer's count is set to what the ledger says (r.Buyers, and 0
//     for the users of settled orders it does not name), raised or
//     lowered, with the TTL the deduction gives it (lua/set_buyers.lua, in
//     chunks): the sale is fenced, so no purchase or release moves a count
//     meanwhile, and the ledger and the outbox hold every purchase that
//     wrote one;
//  3. the stock is lowered to the ledger's (or created), the meta's figures
//     raised, the server's run id recorded and the fence lifted
//     (lua/reopen.lua).
//
// Lifting the fence is what opens the sale: no purchase can run before
// step 3, and every count is in place by then. reopened is false when the
// fence was no longer r.Fence (another edge reopened first, or fenced
// again): the writes stop at the first guarded call that sees it, and what
// was written before that is the same ledger's view.
func (s *Store) Rebuild(ctx context.Context, r Rebuild) (res Reopened, reopened bool, err error) {
	sale := r.SaleStock
	// Stock may be below 0: see lua/reopen.lua.
	if !order.ValidProductID(sale.ProductID) || sale.Limit < 1 || sale.Price < 0 ||
		sale.Initial < 0 || sale.Restocked < 0 || sale.Released < 0 || sale.Paid < 0 || sale.Expired < 0 || r.Fence == "" {
		return res, false, fmt.Errorf("%w: rebuild %+v fence %q", ErrInvalid, sale, r.Fence)
	}
	p := sale.ProductID
	metaKey := MetaKey(p)
	for u, n := range r.Buyers {
		if !order.ValidUserID(u) || n < 0 {
			return res, false, fmt.Errorf("%w: rebuild %s: buyer %q holds %d", ErrInvalid, p, u, n)
		}
	}

	now := r.NowMs
	if now == 0 {
		now = time.Now().UnixMilli()
	}

	// 1. Order states and deadlines: the ledger's settled orders first,
	// every surviving hash of them whatever its age (a hash made again by
	// an earlier rebuild may outlive its order's OrderTTL). Their users
	// that Buyers does not name hold nothing: step 2 sets them to 0.
	holdNothing := map[string]bool{}
	for after := int64(0); r.Settled != nil; {
		page, err := r.Settled(ctx, after)
		if err != nil {
			return res, false, wrapRebuild(p, "settled orders", err)
		}
		if len(page) == 0 {
			break
		}
		for _, o := range page {
			if err := checkRebuildOrder(p, o); err != nil {
				return res, false, err
			}
			if o.State != StatePaid && o.State != StateReleased && o.State != StateExpired || o.ID <= after {
				return res, false, fmt.Errorf("%w: rebuild %s: settled order %+v after %d", ErrInvalid, p, o, after)
			}
			after = o.ID
			if _, named := r.Buyers[o.UserID]; !named {
				holdNothing[o.UserID] = true
			}
		}
		if lifted, err := s.fixOrders(ctx, r.Fence, p, page, true); err != nil || lifted {
			return res, false, wrapRebuild(p, "settled order states", err)
		}
	}
	// Then the orders the sale gives. An order older than OrderTTL would
	// have no hash any more, unless it still waits for its deadline.
	orders := make([]OrderInfo, 0, len(r.Orders))
	for _, o := range r.Orders {
		if err := checkRebuildOrder(p, o); err != nil {
			return res, false, err
		}
		held := o.State == StatePending || o.State == StateSuccess
		if o.CreatedMs+s.opts.OrderTTL.Milliseconds() > now || held && o.PayByMs > 0 {
			orders = append(orders, o)
		}
	}
	slices.SortFunc(orders, func(a, b OrderInfo) int { return cmp.Compare(a.ID, b.ID) })
	if lifted, err := s.fixOrders(ctx, r.Fence, p, orders, false); err != nil || lifted {
		return res, false, wrapRebuild(p, "order states", err)
	}

	// 2. Buyers, exactly.
	expireAt := i64(max(sale.EndMs, now) + s.opts.BuyerGrace.Milliseconds())
	users := make([]string, 0, len(r.Buyers)+len(holdNothing))
	for u := range r.Buyers {
		users = append(users, u)
	}
	for u := range holdNothing {
		users = append(users, u)
	}
	sort.Strings(users)
	// At least one call, also without buyers: in the hash layout the first
	// one clears the buyer hashes (lua/set_buyers.lua).
	shards := buyerShardKeys(p)
	for lo := 0; lo == 0 || lo < len(users); lo += rebuildChunk {
		chunk := users[lo:min(lo+rebuildChunk, len(users))]
		keys := append([]string{metaKey}, shards...)
		args := []string{r.Fence, expireAt, s.buyersArg}
		for _, u := range chunk {
			keys = append(keys, BuyerKey(p, u))
			args = append(args, i64(r.Buyers[u]), u, shardArgs[BuyerShard(u)])
		}
		if lifted, err := s.guarded(ctx, setBuyersScript, keys, args); err != nil || lifted {
			return res, false, wrapRebuild(p, "buyers", err)
		}
	}

	// 3. Open.
	cctx, cancel := s.call(ctx)
	defer cancel()
	out, err := reopenScript.Exec(cctx, s.c, []string{StockKey(p), metaKey},
		[]string{r.Fence, i64(sale.Stock), i64(sale.Initial), i64(sale.Restocked), i64(sale.Released),
			strconv.Itoa(sale.Limit), i64(sale.Price), i64(sale.StartMs), i64(sale.EndMs),
			i64(r.TokensFromMs), s.fenceArg(), i64(sale.Paid), i64(sale.Expired)},
	).AsIntSlice()
	if err != nil {
		return res, false, wrapRebuild(p, "open", err)
	}
	if len(out) != 2 {
		return res, false, wrapRebuild(p, "open", fmt.Errorf("reopen script returned %v", out))
	}
	if out[0] == -2 {
		return res, false, nil
	}
	return Reopened{Before: out[0], After: out[1]}, true, nil
}

func checkRebuildOrder(p string, o OrderInfo) error {
	if o.ProductID != p || o.ID <= 0 || !order.ValidUserID(o.UserID) || !validState(o.State) {
		return fmt.Errorf("%w: rebuild %s: order %+v", ErrInvalid, p, o)
	}
	return nil
}

// fixOrders writes the orders' states (lua/fix_orders.lua) in chunks;
// existing: only to hashes that exist. lifted: see guarded.
func (s *Store) fixOrders(ctx context.Context, fence, p string, orders []OrderInfo, existing bool) (lifted bool, err error) {
	mode := "0"
	if existing {
		mode = "1"
	}
	metaKey, due := MetaKey(p), DueKey(p)
	for lo := 0; lo < len(orders); lo += rebuildChunk {
		chunk := orders[lo:min(lo+rebuildChunk, len(orders))]
		keys := make([]string, 0, 2+2*len(chunk))
		args := make([]string, 0, 5+10*len(chunk))
		keys = append(keys, metaKey, due)
		args = append(args, fence, i64(s.opts.OrderTTL.Milliseconds()), mode, s.layoutArg, s.ledgerArg)
		for _, o := range chunk {
			keys = append(keys, OrderKey(p, o.ID), OrderBucketKey(p, o.ID))
			args = append(args, i64(o.ID), o.State, o.UserID, strconv.Itoa(o.Qty), i64(o.PriceCents),
				i64(o.CreatedMs), strconv.Itoa(o.Edge), i64(o.PayByMs), i64(o.PaidMs), i64(o.ClosedMs))
		}
		if lifted, err := s.guarded(ctx, fixOrdersScript, keys, args); err != nil || lifted {
			return lifted, err
		}
	}
	return false, nil
}

// guarded runs one of the rebuild's scripts; lifted reports that the fence
// was not the rebuild's (and nothing was written).
func (s *Store) guarded(ctx context.Context, script *rueidis.Lua, keys, args []string) (lifted bool, err error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	n, err := script.Exec(ctx, s.c, keys, args).AsInt64()
	if err != nil {
		return false, err
	}
	return n == -1, nil
}

func validState(st string) bool {
	switch st {
	case StatePending, StateSuccess, StatePaid, StateExpired, StateReleased, StateFailed:
		return true
	}
	return false
}

func wrapRebuild(p, step string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("stock: rebuild %s: %s: %w", p, step, err)
}
