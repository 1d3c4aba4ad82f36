package stock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"flashgate/orders/order"
)

// An order (sk:{p}:o:<id>) has two layouts (docs/ledger.md): the string this
// version writes and the hash older ones wrote. Every reader, in Lua
// (order_fn.lua) and here, accepts both, so that edges of both versions can
// sell the same product during a rolling upgrade; an order keeps the layout
// it was made in until its TTL ends.

// order_read and order_value, prepended to every script that reads an order.
//
//go:embed lua/order_fn.lua
var orderFnLua string

// stateOfCode is the state (State*) the first byte of a string order
// stands for; "" for a byte that is none.
func stateOfCode(c byte) string {
	switch c {
	case 'p':
		return StatePending
	case 's':
		return StateSuccess
	case 'P':
		return StatePaid
	case 'E':
		return StateExpired
	case 'R':
		return StateReleased
	case 'F':
		return StateFailed
	}
	return ""
}

// stateOfValue is the state of a string order, read from its first byte.
func stateOfValue(v string) string {
	if len(v) < 2 || v[1] != ':' {
		return ""
	}
	return stateOfCode(v[0])
}

// parseOrderValue reads a string order; ok is false when v is not one.
func parseOrderValue(productID string, orderID int64, v string) (o OrderInfo, ok bool) {
	o.ID, o.ProductID = orderID, productID
	if o.State = stateOfValue(v); o.State == "" {
		return o, false
	}
	rest := v[2:]
	field := func() string {
		f, r, _ := strings.Cut(rest, ":")
		rest = r
		return f
	}
	num := func() int64 { n, _ := strconv.ParseInt(field(), 10, 64); return n }
	o.UserID = field()
	o.Qty = int(num())
	o.PriceCents = num()
	o.CreatedMs = num()
	o.Edge = int(num())
	o.PayByMs = num()
	o.PaidMs = num()
	o.ClosedMs = num()
	return o, order.ValidUserID(o.UserID) && rest == ""
}

// ParseOrder reads the value of a string order (a GET of OrderKey), for
// tools that read Redis with a client of their own; ok is false when v is
// not one (an older edge's order is a hash: the GET answers WRONGTYPE).
func ParseOrder(productID string, orderID int64, v string) (OrderInfo, bool) {
	return parseOrderValue(productID, orderID, v)
}

// userOfValue is the buyer of a string order.
func userOfValue(v string) string {
	if stateOfValue(v) == "" {
		return ""
	}
	u, _, _ := strings.Cut(v[2:], ":")
	return u
}

// isWrongType reports a WRONGTYPE answer: a GET of an older edge's hash.
func isWrongType(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

// readOrder reads one order in any layout (its bucket field and its key in
// one round trip); ok is false when there is none.
func (s *Store) readOrder(ctx context.Context, productID string, orderID int64) (OrderInfo, bool, error) {
	key := OrderKey(productID, orderID)
	rs := s.c.DoMulti(ctx, s.c.B().Hget().Key(OrderBucketKey(productID, orderID)).Field(i64(orderID)).Build(),
		s.c.B().Get().Key(key).Build())
	if v, err := rs[0].ToString(); err == nil {
		o, ok := parseOrderValue(productID, orderID, v)
		return o, ok, nil
	} else if !rueidis.IsRedisNil(err) {
		return OrderInfo{}, false, err
	}
	v, err := rs[1].ToString()
	switch {
	case err == nil:
		o, ok := parseOrderValue(productID, orderID, v)
		return o, ok, nil
	case rueidis.IsRedisNil(err):
		return OrderInfo{}, false, nil
	case !isWrongType(err):
		return OrderInfo{}, false, err
	}
	m, err := s.c.Do(ctx, s.c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil || len(m) == 0 {
		return OrderInfo{}, false, err
	}
	return orderInfo(productID, orderID, m), true, nil
}

// layoutArg is the scripts' argument for Options.OrderHashes.
func layoutArg(hashes bool) string {
	if hashes {
		return "h"
	}
	return "s"
}

// ReadOrders reads the orders of one product with the given ids, in any
// layout, over a client of the caller's (for tests and tools that read
// Redis beside a Store): one pipeline of their bucket fields and GETs, and
// one of HGETALLs for the orders among them that are hashes. Ids without
// an order are absent from the map.
func ReadOrders(ctx context.Context, c rueidis.Client, productID string, ids []int64) (map[int64]OrderInfo, error) {
	if err := checkProduct(productID); err != nil {
		return nil, err
	}
	out := make(map[int64]OrderInfo, len(ids))
	if err := readOrders(ctx, c, productID, ids, out); err != nil {
		return nil, fmt.Errorf("stock: orders %s: %w", productID, err)
	}
	return out, nil
}

func readOrders(ctx context.Context, c rueidis.Client, productID string, ids []int64, out map[int64]OrderInfo) error {
	if len(ids) == 0 {
		return nil
	}
	cmds := make(rueidis.Commands, 0, 2*len(ids))
	for _, id := range ids {
		cmds = append(cmds, c.B().Hget().Key(OrderBucketKey(productID, id)).Field(i64(id)).Build(),
			c.B().Get().Key(OrderKey(productID, id)).Build())
	}
	var hashes []int64
	res := c.DoMulti(ctx, cmds...)
	for i := range ids {
		if v, err := res[2*i].ToString(); err == nil {
			if o, ok := parseOrderValue(productID, ids[i], v); ok {
				out[ids[i]] = o
			}
			continue
		} else if !rueidis.IsRedisNil(err) {
			return err
		}
		v, err := res[2*i+1].ToString()
		switch {
		case err == nil:
			if o, ok := parseOrderValue(productID, ids[i], v); ok {
				out[ids[i]] = o
			}
		case isWrongType(err):
			hashes = append(hashes, ids[i])
		case !rueidis.IsRedisNil(err):
			return err
		}
	}
	if len(hashes) == 0 {
		return nil
	}
	cmds = cmds[:0]
	for _, id := range hashes {
		cmds = append(cmds, c.B().Hgetall().Key(OrderKey(productID, id)).Build())
	}
	for i, r := range c.DoMulti(ctx, cmds...) {
		m, err := r.AsStrMap()
		if err != nil {
			return err
		}
		if len(m) > 0 {
			out[hashes[i]] = orderInfo(productID, hashes[i], m)
		}
	}
	return nil
}

// ScanOrderIDs lists the ids of every order of one product in Redis, in
// either ledger, over a client of the caller's, by SCAN of its order keys
// and order bucket hashes (HKEYS): for tests and tools on a standalone
// server, never on a hot path (a SCAN walks the whole keyspace).
func ScanOrderIDs(ctx context.Context, c rueidis.Client, productID string) ([]int64, error) {
	if err := checkProduct(productID); err != nil {
		return nil, err
	}
	var ids []int64
	for _, pre := range []string{orderKeyPrefix(productID), orderBucketKeyPrefix(productID)} {
		for cursor := uint64(0); ; {
			e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(pre+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				return nil, fmt.Errorf("stock: scan %s: %w", pre, err)
			}
			for _, k := range e.Elements {
				if pre == orderKeyPrefix(productID) {
					if id, err := strconv.ParseInt(k[len(pre):], 10, 64); err == nil {
						ids = append(ids, id)
					}
					continue
				}
				fields, err := c.Do(ctx, c.B().Hkeys().Key(k).Build()).AsStrSlice()
				if err != nil {
					return nil, fmt.Errorf("stock: order bucket %s: %w", k, err)
				}
				for _, f := range fields {
					if id, err := strconv.ParseInt(f, 10, 64); err == nil {
						ids = append(ids, id)
					}
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return ids, nil
}

// Orders reads the orders of the given ids, in either layout, in chunks
// (ReadOrders); ids without an order are absent from the map.
func (s *Store) Orders(ctx context.Context, productID string, ids []int64) (map[int64]OrderInfo, error) {
	if err := checkProduct(productID); err != nil {
		return nil, err
	}
	out := make(map[int64]OrderInfo, len(ids))
	for lo := 0; lo < len(ids); lo += rebuildChunk {
		cctx, cancel := s.call(ctx)
		err := readOrders(cctx, s.c, productID, ids[lo:min(lo+rebuildChunk, len(ids))], out)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("stock: orders %s: %w", productID, err)
		}
	}
	return out, nil
}
