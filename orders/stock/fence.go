package stock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// The fence: how a sale whose Redis went back in time is closed on every
// edge until it has been rebuilt from the ledger.
//
// A sale's meta records the run id of the Redis process it was last
// verified on (warm-up of a new sale, or a rebuild). The deduction script
// compares it with the live server's run id on every call: a restart (also
// from an RDB or AOF that is minutes old) and a promoted replica run under a
// new run id, while the meta they hold — restored or replicated — names the
// old one. The script then sets the meta's fence field and sells nothing, so
// the first call on the new server closes the sale for every edge at once,
// before any stale stock is sold. A missing stock key (Redis restarted
// empty) is fenced by the edge that finds it (Fence).
//
// While fenced, each edge waits until the purchases it started before it saw
// the fence are settled (their events acknowledged by Kafka or failed) and
// says so (MarkQuiet); one edge (LockRecovery) waits for every live edge's
// word (LiveEdges, QuietNodes), drains the pipeline, reads the ledger and
// reopens the sale with Rebuild.

const (
	fieldFence  = "recovering" // meta: the fence in force
	fieldTokens = "tokens"     // meta: the token horizon (RebuildPlan.TokensFromMs)
	quietPrefix = "quiet:"     // meta: quiet:<node> = the fence that node is quiet on
)

var (
	//go:embed lua/fence.lua
	fenceLua string
	//go:embed lua/unlock.lua
	unlockLua string
	//go:embed lua/reserve_ids.lua
	reserveIDsLua string

	fenceScript      = rueidis.NewLuaScript(fenceLua)
	unlockScript     = rueidis.NewLuaScript(unlockLua)
	reserveIDsScript = rueidis.NewLuaScript(reserveIDsLua)
)

// FenceID names a fence: when (the fencing edge's clock), by whom, why.
func FenceID(nowMs int64, node int, reason string) string {
	return strconv.FormatInt(nowMs, 10) + ":" + strconv.Itoa(node) + ":" + reason
}

// FenceTime is the unix ms a fence id was set at (0 if it has none).
func FenceTime(fence string) int64 {
	ms, _, _ := strings.Cut(fence, ":")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return n
}

// Fence closes the sale for a rebuild (the deduction answers Recovering)
// unless it is fenced already, and returns the fence in force.
func (s *Store) Fence(ctx context.Context, productID, fence string) (string, error) {
	if err := checkProduct(productID); err != nil {
		return "", err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	cur, err := fenceScript.Exec(ctx, s.c, []string{MetaKey(productID)}, []string{fence}).ToString()
	if err != nil {
		return "", fmt.Errorf("stock: fence %s: %w", productID, err)
	}
	return cur, nil
}

// MarkQuiet records that node has nothing in flight for the sale from
// before fence.
func (s *Store) MarkQuiet(ctx context.Context, productID string, node int, fence string) error {
	if err := checkProduct(productID); err != nil {
		return err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	err := s.c.Do(ctx, s.c.B().Hset().Key(MetaKey(productID)).FieldValue().
		FieldValue(quietPrefix+strconv.Itoa(node), fence).Build()).Error()
	if err != nil {
		return fmt.Errorf("stock: quiet %s: %w", productID, err)
	}
	return nil
}

// QuietNodes lists the nodes that are quiet on fence.
func (s *Store) QuietNodes(ctx context.Context, productID, fence string) (map[int]bool, error) {
	if err := checkProduct(productID); err != nil {
		return nil, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	m, err := s.c.Do(ctx, s.c.B().Hgetall().Key(MetaKey(productID)).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("stock: quiet %s: %w", productID, err)
	}
	out := map[int]bool{}
	for k, v := range m {
		if n, ok := strings.CutPrefix(k, quietPrefix); ok && v == fence {
			if id, err := strconv.Atoi(n); err == nil {
				out[id] = true
			}
		}
	}
	return out, nil
}

// Heartbeat records that node is alive, for LiveEdges, and since when
// (startMs, the process's start: EdgeBeat).
func (s *Store) Heartbeat(ctx context.Context, node int, nowMs, startMs int64) error {
	ctx, cancel := s.call(ctx)
	defer cancel()
	n := strconv.Itoa(node)
	return s.c.Do(ctx, s.c.B().Hset().Key(edgesKey).FieldValue().
		FieldValue(n, i64(nowMs)).FieldValue(n+startField, i64(startMs)).Build()).Error()
}

// startField follows a node's number in sk:edges: the start of the process
// that beats for it (LiveEdges reads only the numbers).
const startField = ":start"

// stopField follows a node's number in sk:edges: when its last process that
// exited gracefully stopped following its purchases of unknown outcome
// (EdgeStopped).
const stopField = ":stop"

// EdgeBeat is node's last heartbeat and the start of the process that wrote
// it, unix ms (0 when unknown: never beat, or an older edge that did not
// write its start), and when a process of node last exited gracefully
// (EdgeStopped; 0: never). stop is on the clock of the process that wrote
// it, as the order ids it made are: comparing the two needs no agreement
// between clocks.
func (s *Store) EdgeBeat(ctx context.Context, node int) (lastMs, startMs, stopMs int64, err error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	n := strconv.Itoa(node)
	v, err := s.c.Do(ctx, s.c.B().Hmget().Key(edgesKey).Field(n, n+startField, n+stopField).Build()).ToArray()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("stock: edge %d: %w", node, err)
	}
	ms := make([]int64, 3)
	for i := range min(len(v), 3) {
		if str, err := v[i].ToString(); err == nil {
			ms[i], _ = strconv.ParseInt(str, 10, 64)
		}
	}
	return ms[0], ms[1], ms[2], nil
}

// EdgeStopped records that node's process is exiting at stopMs (its own
// clock) and follows none of the purchases of unknown outcome it made
// before: any edge may settle them at once (sale.settleOrphan), whatever
// the clock of the process that takes the node's number next.
func (s *Store) EdgeStopped(ctx context.Context, node int, stopMs int64) error {
	ctx, cancel := s.call(ctx)
	defer cancel()
	return s.c.Do(ctx, s.c.B().Hset().Key(edgesKey).FieldValue().
		FieldValue(strconv.Itoa(node)+stopField, i64(stopMs)).Build()).Error()
}

// IDReserve is how a call to ReserveIDs uses the node's reservation.
type IDReserve string

const (
	// IDsFirst: a process's first call; its ids must start after the
	// reservation read (ReserveIDs' before).
	IDsFirst IDReserve = "first"
	// IDsRenew: a running process keeps its reservation ahead of its ids.
	IDsRenew IDReserve = "renew"
	// IDsExit: the process issues no more ids; the reservation shrinks to
	// its last (and its exit mark), so that the next process's ids do not
	// run ahead of its clock.
	IDsExit IDReserve = "exit"
)

// ReserveIDs records, in sk:edges, the latest time (unix ms, the node's own
// clock) an order id of node's running process may carry: at least tickMs
// + spanMs (at exit exactly tickMs, or its exit mark if later). before is
// the reservation found: on IDsFirst the ids a previous process of the node
// may have issued, which this one's must follow (orderid.Generator.Floor);
// with none recorded (an earlier version's edge), its last heartbeat +
// legacyMs, or its exit mark. Order ids are made of the edge's clock, and
// an edge restarted with its clock behind its previous run would otherwise
// issue some of the same ids again (nemesis seed 557: one id answered to
// two purchases).
func (s *Store) ReserveIDs(ctx context.Context, node int, tickMs, spanMs int64, how IDReserve, legacyMs int64) (before, now int64, err error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	v, err := reserveIDsScript.Exec(ctx, s.c, []string{edgesKey},
		[]string{strconv.Itoa(node), i64(tickMs), i64(spanMs), string(how), i64(legacyMs)}).AsIntSlice()
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("answer %v", v)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("stock: reserve order ids of edge %d: %w", node, err)
	}
	return v[0], v[1], nil
}

// LiveEdges lists the nodes whose last heartbeat is at or after sinceMs.
func (s *Store) LiveEdges(ctx context.Context, sinceMs int64) ([]int, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	m, err := s.c.Do(ctx, s.c.B().Hgetall().Key(edgesKey).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("stock: edges: %w", err)
	}
	var out []int
	for k, v := range m {
		id, err1 := strconv.Atoi(k)
		ms, err2 := strconv.ParseInt(v, 10, 64)
		if err1 == nil && err2 == nil && ms >= sinceMs {
			out = append(out, id)
		}
	}
	return out, nil
}

// LockRecovery takes the sale's rebuild lock for owner for ttl; false when
// another owner holds it.
func (s *Store) LockRecovery(ctx context.Context, productID, owner string, ttl time.Duration) (bool, error) {
	if err := checkProduct(productID); err != nil {
		return false, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	err := s.c.Do(ctx, s.c.B().Set().Key(RecoverKey(productID)).Value(owner).Nx().Px(ttl).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stock: lock %s: %w", productID, err)
	}
	return true, nil
}

// RenewRecovery extends the lock to ttl from now if owner still holds it;
// false when it does not (it lapsed, and maybe another edge took it). The
// lock is a short lease its holder renews while it rebuilds, so that a
// holder that died (kill -9, a lost host) stops blocking the others within
// one lease, not within a whole rebuild's budget.
func (s *Store) RenewRecovery(ctx context.Context, productID, owner string, ttl time.Duration) (bool, error) {
	if err := checkProduct(productID); err != nil {
		return false, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	n, err := unlockScript.Exec(ctx, s.c, []string{RecoverKey(productID)}, []string{owner, i64(ttl.Milliseconds())}).AsInt64()
	if err != nil {
		return false, fmt.Errorf("stock: renew lock %s: %w", productID, err)
	}
	return n == 1, nil
}

// UnlockRecovery releases the lock if owner still holds it.
func (s *Store) UnlockRecovery(ctx context.Context, productID, owner string) error {
	if err := checkProduct(productID); err != nil {
		return err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	return unlockScript.Exec(ctx, s.c, []string{RecoverKey(productID)}, []string{owner}).Error()
}
