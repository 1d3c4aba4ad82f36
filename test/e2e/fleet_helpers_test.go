package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"flashgate/internal/chtest"
	"flashgate/internal/kafkatest"
	"flashgate/internal/redistest"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
)

// The fleet test (fleet_test.go) runs a sale the way a production fleet
// does: three edge processes of the real binary, each with the order
// consumer and the outbox relay, in front of a 3+3 Redis Cluster, a
// three-broker Kafka-protocol cluster (kfake, topics with replication
// factor 3) and a ClickHouse cluster of two shards of two replicas
// (clickhouse.cluster: a Distributed table over ReplicatedReplacingMergeTree
// tables, with the ZooKeeper those need).

const (
	fleetEdges = 3
	// fleetConfig is what the fleet's edges set beyond the orders tests'
	// pipeline: topics as production creates them, and a relay that
	// re-sends an entry a second after kafka.timeout (3s) gave up on it.
	fleetConfig = "kafka: {replication_factor: 3, min_insync_replicas: 2}\n" +
		"orders: {relay_min_age: 4s, relay_interval: 200ms}\n"
	// fleetRate and fleetBurst are user_limit's one rate (nodelay): far
	// above what a shopper of the sale asks (a token and a purchase, once
	// more for one in eight), far below what the hammering user does.
	fleetRate  = 10 // r/s
	fleetBurst = 10
	fleetTopic = "seckill.orders"     // kafka.topic's default
	fleetDLQ   = "seckill.orders.dlq" // kafka.dlq_topic's default
	fleetGroup = "flashgate-orders"   // orders.group's default: the consumers' Kafka group
	fleetNode0 = 31                   // node_id of the first edge
)

// fleet is the servers and the edges of one fleet test.
type fleet struct {
	t     *testing.T
	env   *ordEnv
	redis *redistest.Cluster
	kafka *kafkatest.Cluster
	ch    *chtest.Cluster
	bin   string
	edges []*edge
	procs []*edgeProc
	nodes []int      // node_id of each edge
	docs  [][]string // the YAML documents of each edge's config file
}

// in points the fleet, and the clients it shares, at t (a sub-test of
// the one that started it): their failures are t's.
func (f *fleet) in(t *testing.T) *fleet {
	f.t, f.env.t, f.env.rd.t = t, t, t
	for _, e := range f.edges {
		e.t = t
	}
	return f
}

// fleetFilters is the sale chain of baseConfig with user_limit's policy
// (local or redis) and the fleet's rate.
func fleetFilters(policy string) string {
	return fmt.Sprintf(`filters:
  - {type: access, scope: all, rules: ["allow all"]}
  - {type: ip_limit, rate: 1000000r/s, burst: 1000000, nodelay: true}
  - {type: conn_limit, max: 100000}
  - {type: sale_window}
  - {type: sold_out}
  - {type: session}
  - type: user_limit
    policy: %s
    limits: [{rate: %dr/s, burst: %d, nodelay: true}]
  - {type: purchase_token}
`, policy, fleetRate, fleetBurst)
}

// startFleet starts the servers and fleetEdges edges selling sales (an
// activities document); extra YAML documents go after the fleet's own.
func startFleet(t *testing.T, sales string, extra ...string) *fleet {
	t.Helper()
	extra = append([]string{fleetFilters("local")}, extra...)
	f := &fleet{t: t, bin: buildProxy(t)}
	f.redis = redistest.NewCluster(t)
	f.kafka = kafkatest.StartCluster(t, 3)
	f.ch = chtest.NewClusterWith(t, chtest.ClusterSpec{Shards: 2, Replicas: 2})
	f.env = newFleetEnv(t, f.redis, f.kafka, f.ch)
	seeds := strings.Join(f.redis.Addrs(), ",")
	// After the pipeline's clickhouse section: every member, and the
	// cluster's name.
	extra = append([]string{fmt.Sprintf("clickhouse: {addr: %q, cluster: %q}\n", f.ch.Addr(), f.ch.Name())}, extra...)
	for i := range fleetEdges {
		addr, admin := ordFreePort(t), ordFreePort(t)
		node := fleetNode0 + i
		first := fmt.Sprintf("node_id: %d\nredis: {addr: %q}\nlisten: {addr: %q}\nadmin: {addr: %q}\nlog: {level: info, format: json}\n",
			node, seeds, addr, admin)
		docs := append([]string{first}, f.env.pipeline(true, append([]string{fleetConfig, sales}, extra...)...)...)
		cfg := writeConfig(t, docs...)
		// One at a time: the first creates the topics, the others find
		// them and check their replication.
		f.procs = append(f.procs, startEdgeProc(t, f.bin, "-c", cfg))
		e := &edge{t: t, addr: addr, admin: admin, cfg: cfg, api: newAPIClient()}
		t.Cleanup(e.api.CloseIdleConnections)
		f.edges = append(f.edges, e)
		f.nodes = append(f.nodes, node)
		f.docs = append(f.docs, docs)
	}
	return f
}

// reload rewrites every edge's config file with extra documents after its
// own and has the edges reload it (POST /admin/reload answers once the
// new snapshot serves, or 422).
func (f *fleet) reload(extra ...string) {
	f.t.Helper()
	for i, e := range f.edges {
		rendered, err := os.ReadFile(writeConfig(f.t, append(slices.Clone(f.docs[i]), extra...)...))
		if err != nil {
			f.t.Fatal(err)
		}
		if err := os.WriteFile(e.cfg, rendered, 0o644); err != nil {
			f.t.Fatal(err)
		}
		if code, body := adminPost(f.t, e.admin, "/admin/reload", ""); code != 200 {
			f.t.Fatalf("edge %d: reload answered %d: %s", f.nodes[i], code, body)
		}
	}
}

// hammered is what one user hammering the edges got.
type hammered struct {
	passed, refused int
	other           map[string]int // answers neither 200 nor 429
	window          time.Duration  // first request sent to last answer: every decision fell in it
}

// hammer has one user ask the edges, in turn, for purchase tokens of
// product from workers concurrent connections for d.
func (f *fleet) hammer(user, product string, workers int, d time.Duration) hammered {
	f.t.Helper()
	jwt := f.env.j.get(user)
	var passed, refused, next atomic.Int64
	var last atomic.Int64 // ns since start of the latest answer
	var mu sync.Mutex
	other := map[string]int{}
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for time.Since(start) < d {
				e := f.edges[int(next.Add(1)-1)%len(f.edges)]
				r, _, err := e.token(jwt, product)
				at := int64(time.Since(start))
				for l := last.Load(); at > l && !last.CompareAndSwap(l, at); l = last.Load() {
				}
				switch {
				case err != nil:
					mu.Lock()
					other["transport error"]++
					mu.Unlock()
				case r.status == 200:
					passed.Add(1)
				case r.status == 429:
					refused.Add(1)
				default:
					mu.Lock()
					other[strconv.Itoa(r.status)+" "+r.code()]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return hammered{passed: int(passed.Load()), refused: int(refused.Load()), other: other, window: time.Duration(last.Load())}
}

// newFleetEnv is the orders tests' ordEnv on the fleet's servers: the
// Redis Cluster (the test's own client follows its slots from one seed),
// every broker of the Kafka cluster, and the ClickHouse cluster through
// its first member, whose seckill_order is the Distributed table over
// both shards.
func newFleetEnv(t *testing.T, rc *redistest.Cluster, kc *kafkatest.Cluster, ch *chtest.Cluster) *ordEnv {
	t.Helper()
	env := &ordEnv{t: t, ch: ch.Node(0), j: newJWTs(t, sessionSecret), dataDir: t.TempDir(),
		brokers: kc.Brokers(), kafka: kc.Cluster}
	env.rd = openRedis(t, rc.Addrs()[0])
	env.chc = openClickHouse(t, env.ch.Addr())
	return env
}

// openClickHouse is the test's own connection to a ClickHouse server.
func openClickHouse(t *testing.T, addr string) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{
		Protocol:    clickhouse.Native,
		Addr:        []string{addr},
		Auth:        clickhouse.Auth{Database: "default", Username: "default"},
		DialTimeout: 2 * time.Second,
		ReadTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatalf("clickhouse %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// awaitActive waits until every edge sells every product.
func (f *fleet) awaitActive(products []string, d time.Duration) {
	f.t.Helper()
	for i, e := range f.edges {
		for _, p := range products {
			if !waitFor(d, func() bool {
				res, err := e.do("GET", "/api/seckill/status?productId="+p, "", nil)
				return err == nil && res.status == 200 && jsonStr(res.body, "status") == "active"
			}) {
				f.t.Fatalf("edge %d: %s not active after %v", f.nodes[i], p, d)
			}
		}
	}
}

// roundRobin is a load balancer in front of the edges: each attempt goes
// to the next edge in service; route takes an edge out of it.
type roundRobin struct {
	live atomic.Pointer[[]*edge]
	n    atomic.Uint64
}

func newRoundRobin(edges []*edge) *roundRobin {
	rr := &roundRobin{}
	rr.route(edges)
	return rr
}

func (rr *roundRobin) route(edges []*edge) { rr.live.Store(&edges) }

func (rr *roundRobin) next() *edge {
	es := *rr.live.Load()
	return es[(rr.n.Add(1)-1)%uint64(len(es))]
}

// fleetPlans makes n attempts of quantity 1 over the products in turn by
// shoppers drawn from users ids (seeded, so a run can be repeated); every
// repeat-th attempt is instead a shopper trying an earlier attempt's
// purchase again (on whichever edge the balancer picks, whose bought
// cache may not know them: Redis must refuse it beyond the limit).
func fleetPlans(n, users, repeat int, products []string) []ordPlan {
	rng := rand.New(rand.NewPCG(14, 5))
	out := make([]ordPlan, n)
	fresh := 0
	for i := range out {
		if i > 0 && i%repeat == 0 {
			out[i] = out[rng.IntN(i)]
			continue
		}
		out[i] = ordPlan{user: "u" + strconv.Itoa(rng.IntN(users)), product: products[fresh%len(products)]}
		fresh++
	}
	return out
}

// outboxOf lists the outbox entries node wrote that are still there
// (XRANGE over every product): the orders whose events its edge never
// saw acknowledged.
func (f *fleet) outboxOf(products []string, node int) (orders []ordID, entries int) {
	f.t.Helper()
	c := f.env.rd.c
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range products {
		xs, err := c.Do(ctx, c.B().Xrange().Key(stock.OutboxKey(p)).Start("-").End("+").Build()).AsXRange()
		if err != nil {
			f.t.Fatalf("XRANGE outbox of %s: %v", p, err)
		}
		for _, e := range xs {
			// One order's entry, or a deduction call's (ledger b): all
			// of its orders are the same edge's.
			evs, err := (&stock.OutboxEntry{ID: e.ID, Fields: e.FieldValues}).Events()
			if err != nil {
				f.t.Fatalf("outbox entry %s of %s: %v", e.ID, p, err)
			}
			mine := false
			for _, ev := range evs {
				if ev.Edge == node {
					orders, mine = append(orders, ordID{p, ev.ID}), true
				}
			}
			if mine {
				entries++
			}
		}
	}
	return orders, entries
}

// phases splits the answers of a load by the moments of its scenario.
type phases struct {
	names []string
	at    []time.Duration // when each phase began, since the load started
}

func (ph *phases) begin(name string, at time.Duration) {
	ph.names = append(ph.names, name)
	ph.at = append(ph.at, at)
}

// of is the index of the phase an answer at d fell in.
func (ph *phases) of(d time.Duration) int {
	i := 0
	for i+1 < len(ph.at) && d >= ph.at[i+1] {
		i++
	}
	return i
}

// awaitGroup waits until the order consumers' group is Stable with
// members members, each consuming, and returns how long that took.
func (f *fleet) awaitGroup(members int, d time.Duration, what string) time.Duration {
	f.t.Helper()
	start := time.Now()
	var g kafkatest.Group
	var err error
	if !waitFor(d, func() bool {
		g, err = f.kafka.DescribeGroup(fleetGroup)
		return err == nil && g.Stable(members)
	}) {
		f.t.Fatalf("%s: the order consumers' group is not stable with %d members after %v: %+v (%v)", what, members, d, g, err)
	}
	return time.Since(start)
}

// syncReplicas has every member fetch what its shard's replication log
// lists (SYSTEM SYNC REPLICA): a Distributed read then counts the same
// whichever replica of a shard answers it.
func (f *fleet) syncReplicas() {
	f.t.Helper()
	for i, addr := range f.ch.Addrs() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := openClickHouse(f.t, addr).Exec(ctx, "SYSTEM SYNC REPLICA "+ordDatabase+".seckill_order"+orderstore.LocalSuffix)
		cancel()
		if err != nil {
			f.t.Fatalf("member %d (%s): sync replica: %v", i+1, addr, err)
		}
	}
}

// shardRows reads every shard's own table (seckill_order_local FINAL) on
// each of its replicas, which must hold the same orders (call
// syncReplicas first): order id -> user id, one map per shard.
func (f *fleet) shardRows() []map[int64]string {
	f.t.Helper()
	out := make([]map[int64]string, f.ch.Shards())
	for s := range out {
		for r, member := range f.ch.Shard(s) {
			rows := f.localRows(member.Addr())
			if r == 0 {
				out[s] = rows
				continue
			}
			missing, extra := 0, 0
			for id := range out[s] {
				if _, ok := rows[id]; !ok {
					missing++
				}
			}
			for id := range rows {
				if _, ok := out[s][id]; !ok {
					extra++
				}
			}
			if missing+extra > 0 {
				f.t.Errorf("shard %d: replica %d lacks %d of the first replica's %d orders and holds %d it does not",
					s+1, r+1, missing, len(out[s]), extra)
			}
		}
	}
	return out
}

// localRows is one member's seckill_order_local FINAL: order id -> user id.
func (f *fleet) localRows(addr string) map[int64]string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rs, err := openClickHouse(f.t, addr).Query(ctx, "SELECT order_id, user_id FROM "+ordDatabase+".seckill_order"+orderstore.LocalSuffix+" FINAL")
	if err != nil {
		f.t.Fatalf("%s: %v", addr, err)
	}
	defer rs.Close()
	out := map[int64]string{}
	for rs.Next() {
		var id uint64
		var user string
		if err := rs.Scan(&id, &user); err != nil {
			f.t.Fatalf("%s: %v", addr, err)
		}
		out[int64(id)] = user
	}
	if err := rs.Err(); err != nil {
		f.t.Fatalf("%s: %v", addr, err)
	}
	return out
}

// engines are the engines of the order tables on every member, and fail
// the test unless seckill_order is Distributed and its local table
// ReplicatedReplacingMergeTree everywhere.
func (f *fleet) engines() map[string]string {
	f.t.Helper()
	want := map[string]string{"seckill_order": "Distributed", "seckill_order" + orderstore.LocalSuffix: "ReplicatedReplacingMergeTree"}
	got := map[string]string{}
	for i, addr := range f.ch.Addrs() {
		conn := openClickHouse(f.t, addr)
		for table, engine := range want {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var e string
			err := conn.QueryRow(ctx, "SELECT engine FROM system.tables WHERE database = ? AND name = ?", ordDatabase, table).Scan(&e)
			cancel()
			if err != nil || e != engine {
				f.t.Errorf("member %d (%s): %s.%s has engine %q (%v), want %s", i+1, addr, ordDatabase, table, e, err, engine)
			}
			got[table] = e
		}
	}
	return got
}

// checkTopics fails the test unless the edges created the order and
// dead-letter topics with the fleet's replication: 3 replicas of every
// partition, min.insync.replicas 2.
func (f *fleet) checkTopics() {
	f.t.Helper()
	for _, name := range []string{fleetTopic, fleetDLQ} {
		tp, err := f.kafka.DescribeTopic(name)
		if err != nil || tp.Replicas != 3 || tp.MinInsyncReplicas != "2" {
			f.t.Errorf("topic %s: %+v (%v), want 3 replicas of every partition and min.insync.replicas 2", name, tp, err)
		}
	}
}
