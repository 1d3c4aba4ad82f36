package orderstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"flashgate/conf"
	"flashgate/internal/await"
	"flashgate/internal/chtest"
	"flashgate/orders/order"
)

// dial is a plain connection to one server, for looking behind the store.
func dial(t *testing.T, addr string) driver.Conn {
	t.Helper()
	c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func count(t *testing.T, c driver.Conn, q string, args ...any) uint64 {
	t.Helper()
	var n uint64
	if err := c.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func openCluster(t *testing.T, c *chtest.Cluster, addr, db string) *ClickHouse {
	t.Helper()
	s, err := OpenClickHouse(context.Background(), addr, db, ClickHouseOptions{Cluster: c.Name(), Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestClickHouseCluster runs the store on two shards of one replica each
// (one ZooKeeper, ON CLUSTER DDL, replicated local tables and Distributed
// ones over them).
func TestClickHouseCluster(t *testing.T) {
	c := chtest.NewCluster(t, 2)
	t.Logf("cluster of 2 shards started in %v", c.StartTook())
	ctx := context.Background()

	t.Run("Contract", func(t *testing.T) {
		contract(t, func(t *testing.T) (Store, func() Store) {
			db := freshDB()
			s := openCluster(t, c, c.Addr(), db)
			return s, func() Store { s.Close(); return openCluster(t, c, c.Addr(), db) }
		})
	})

	t.Run("SchemaOnEveryMember", func(t *testing.T) {
		db := freshDB()
		openCluster(t, c, c.Addrs()[0], db) // one address: the DDL reaches the other member ON CLUSTER
		// Opened again (every edge start), it finds the tables and queues
		// no DDL.
		queue := "SELECT count() FROM system.zookeeper WHERE path = '/clickhouse/task_queue/ddl'"
		before := count(t, dial(t, c.Addrs()[0]), queue)
		openCluster(t, c, c.Addrs()[1], db)
		if after := count(t, dial(t, c.Addrs()[0]), queue); after != before {
			t.Errorf("opening an existing layout queued %d DDL statements", after-before)
		}
		for i, a := range c.Addrs() {
			n := dial(t, a)
			var engine, part string
			if err := n.QueryRow(ctx, "SELECT engine, partition_key FROM system.tables WHERE database = ? AND name = ?", db, "seckill_order_local").Scan(&engine, &part); err != nil {
				t.Fatalf("member %d: %v", i, err)
			}
			if engine != "ReplicatedReplacingMergeTree" || part != "toYYYYMM(create_time)" {
				t.Errorf("member %d: seckill_order_local is %s partitioned by %q", i, engine, part)
			}
			var full string
			if err := n.QueryRow(ctx, "SELECT engine_full FROM system.tables WHERE database = ? AND name = ?", db, "seckill_order").Scan(&full); err != nil {
				t.Fatalf("member %d: %v", i, err)
			}
			if !strings.Contains(full, "cityHash64(user_id)") {
				t.Errorf("member %d: seckill_order is %s", i, full)
			}
		}
	})

	t.Run("OrdersLandOnTheirUsersShard", func(t *testing.T) {
		db := freshDB()
		s := openCluster(t, c, c.Addr(), db)
		base := time.Date(2026, 11, 11, 0, 0, 0, 0, time.UTC).UnixMilli()
		var rows []Row
		for i := range 200 {
			rows = append(rows, Row{Status: StatusUnpaid, UpdatedMs: base + int64(i), Order: order.Order{
				ID: int64(1000 + i), ProductID: "p1", UserID: fmt.Sprintf("u%d", i%50), Qty: 1, PriceCents: 100, CreatedMs: base + int64(i)}})
		}
		if err := s.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
		// Every row redelivered (another batch, so another part), and the
		// first ten released.
		again := append([]Row(nil), rows...)
		for i := range 10 {
			again[i].Status, again[i].UpdatedMs = StatusCancelled, base+10_000
		}
		if err := s.Insert(ctx, again); err != nil {
			t.Fatal(err)
		}
		var total uint64
		for shard, a := range c.Addrs() {
			n := dial(t, a)
			here := count(t, n, "SELECT count() FROM "+db+".seckill_order_local")
			wrong := count(t, n, "SELECT count() FROM "+db+".seckill_order_local WHERE cityHash64(user_id) % 2 != ?", uint64(shard))
			if here == 0 || wrong != 0 {
				t.Errorf("shard %d holds %d rows, %d of them of another shard's users", shard+1, here, wrong)
			}
			total += here
		}
		if total != 400 {
			t.Errorf("the shards hold %d rows, want 400 (both deliveries, before merges)", total)
		}
		// Read from either member, FINAL through the Distributed table sees
		// one row per order, complete.
		for _, a := range c.Addrs() {
			r := openCluster(t, c, a, db)
			got, err := r.Totals(ctx, "p1")
			if err != nil {
				t.Fatal(err)
			}
			want := Totals{UnpaidOrders: 190, UnpaidUnits: 190, CancelledOrders: 10, CancelledUnits: 10, MaxUser: got.MaxUser, MaxUserUnits: 4}
			if got != want {
				t.Errorf("totals via %s: %+v, want %+v", a, got, want)
			}
			st, err := Ledger{Store: r}.Rebuild(ctx, "p1", []int64{1000, 1010, 1199, 5})
			if err != nil {
				t.Fatal(err)
			}
			if st.Sold != 190 || st.Released != 10 || len(st.Buyers) != 50 || len(st.Statuses) != 3 || st.Statuses[1000].Status != StatusCancelled {
				t.Errorf("ledger via %s: sold %d released %d buyers %d statuses %v", a, st.Sold, st.Released, len(st.Buyers), st.Statuses)
			}
		}
	})

	t.Run("WrongLayoutIsRefused", func(t *testing.T) {
		for _, tc := range []struct {
			name, ddl, want string
		}{
			{"LocalNotReplicated", "CREATE TABLE %s.seckill_order_local ON CLUSTER " + c.Name() +
				" (order_id UInt64, product_id String, user_id String, quantity UInt32, price Decimal(10,2), status UInt8, create_time DateTime, update_ms UInt64, edge UInt16)" +
				" ENGINE = ReplacingMergeTree(update_ms) PARTITION BY toYYYYMM(create_time) ORDER BY (product_id, order_id)",
				"seckill_order_local: engine is ReplacingMergeTree(update_ms)"},
			{"ShardedByOrder", "CREATE TABLE %s.seckill_order ON CLUSTER " + c.Name() +
				" (order_id UInt64, product_id String, user_id String, quantity UInt32, price Decimal(10,2), status UInt8, create_time DateTime, update_ms UInt64, edge UInt16)" +
				" ENGINE = Distributed(" + c.Name() + ", %s, seckill_order_local, order_id)",
				"seckill_order: engine is Distributed(" + c.Name() + ", %s, seckill_order_local, order_id), want Distributed(" + c.Name() + ", %s, seckill_order_local, cityHash64(user_id))"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				db := freshDB()
				n := dial(t, c.Addrs()[0])
				if err := n.Exec(ctx, "CREATE DATABASE "+db+" ON CLUSTER "+c.Name()); err != nil {
					t.Fatal(err)
				}
				ddl := strings.ReplaceAll(tc.ddl, "%s", db)
				if err := n.Exec(ctx, ddl); err != nil {
					t.Fatal(err)
				}
				_, err := OpenClickHouse(ctx, c.Addr(), db, ClickHouseOptions{Cluster: c.Name()})
				if !IsSchemaError(err) {
					t.Fatalf("err = %v, want a *SchemaError", err)
				}
				for _, a := range c.Addrs() {
					// Named on every member, with what is wrong.
					if want := a + " (shard "; !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not name member %s", err, a)
					}
				}
				if want := strings.ReplaceAll(tc.want, "%s", db); !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
				t.Log(err)
			})
		}
	})

	t.Run("RetentionDropsOnEveryShard", func(t *testing.T) {
		db := freshDB()
		w := openCluster(t, c, c.Addr(), db)
		rows := retentionRows()
		for i := range 40 { // users on both shards
			rows = append(rows, agedRow(int64(100+i), "p-old", fmt.Sprintf("v%d", i), "2026-01-20"))
		}
		if err := w.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
		s, err := OpenClickHouse(ctx, c.Addr(), db, ClickHouseOptions{Cluster: c.Name(), RetentionMonths: 3,
			RetentionFirst: time.Millisecond, Now: retentionNow, Live: live})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		await.Until(t, 20*time.Second, "p-old and p-edge dropped on every shard", func() bool {
			for _, a := range c.Addrs() {
				if count(t, dial(t, a), "SELECT count() FROM "+db+".seckill_order_local WHERE product_id IN ('p-old', 'p-edge')") != 0 {
					return false
				}
			}
			return true
		})
		got, err := s.Totals(ctx, "p-mixed")
		if err != nil || got.HeldOrders() != 2 {
			t.Fatalf("p-mixed after retention: %+v, %v", got, err)
		}
		for _, p := range []string{"p-live", "p-new"} {
			if got, err := s.Totals(ctx, p); err != nil || got.HeldOrders() != 1 {
				t.Fatalf("%s after retention: %+v, %v", p, got, err)
			}
		}
	})

	t.Run("FromConfig", func(t *testing.T) {
		// What an edge does with `clickhouse: {addr, cluster}`.
		opts, err := OptionsFrom(conf.ClickHouseConfig{Addr: c.Addr(), Cluster: c.Name(),
			ZooKeeperPath: conf.DefaultZooKeeperPath, Replica: conf.DefaultReplica})
		if err != nil {
			t.Fatal(err)
		}
		db := freshDB()
		s, err := OpenClickHouse(ctx, c.Addr(), db, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Insert(ctx, []Row{agedRow(1, "p1", "u1", "2026-11-11")}); err != nil {
			t.Fatal(err)
		}
		if n := count(t, dial(t, c.Addrs()[0]), "SELECT count() FROM "+db+".seckill_order"); n != 1 {
			t.Fatalf("the Distributed table counts %d rows right after Insert, want 1", n)
		}
	})

	t.Run("MigratesEarlierLayout", func(t *testing.T) { migrateEarlierLayout(t, c) })

	t.Run("UnknownCluster", func(t *testing.T) {
		_, err := OpenClickHouse(ctx, c.Addr(), freshDB(), ClickHouseOptions{Cluster: "nosuch"})
		if err == nil || !strings.Contains(err.Error(), `cluster "nosuch" is not in the server's system.clusters`) || !strings.Contains(err.Error(), c.Name()) {
			t.Fatalf("err = %v, want one naming the unknown cluster and the known ones", err)
		}
		t.Log(err)
	})

	// Last: it stops a member.
	t.Run("UnreachableMember", func(t *testing.T) {
		c.Stop(1)
		defer func() {
			if err := c.Start(1); err != nil {
				t.Error(err)
			}
		}()
		start := time.Now()
		_, err := OpenClickHouse(ctx, c.Addrs()[0], freshDB(), ClickHouseOptions{Cluster: c.Name()})
		if err == nil || !strings.Contains(err.Error(), "member "+c.Addrs()[1]+" (shard 2, replica 1) does not answer") {
			t.Fatalf("err = %v, want one naming the member that is down", err)
		}
		t.Logf("refused in %v: %v", time.Since(start), err)
	})
}

// TestClickHouseReplicasLedgerIsExact writes through one replica and reads
// the ledger through the other at once: the Distributed table reads the
// local replica, which replicates asynchronously, so without
// SyncReplicas the read could miss the insert just made.
func TestClickHouseReplicasLedgerIsExact(t *testing.T) {
	c := chtest.NewClusterWith(t, chtest.ClusterSpec{Shards: 1, Replicas: 2})
	t.Logf("cluster of 1 shard x 2 replicas started in %v", c.StartTook())
	ctx := context.Background()
	db := freshDB()
	w := openCluster(t, c, c.Addrs()[0], db)
	r := openCluster(t, c, c.Addrs()[1], db)
	l := Ledger{Store: r}
	base := time.Date(2026, 11, 11, 0, 0, 0, 0, time.UTC).UnixMilli()
	for i := range 20 {
		batch := make([]Row, 10)
		for j := range batch {
			id := int64(i*10 + j + 1)
			batch[j] = Row{Status: StatusUnpaid, UpdatedMs: base + id, Order: order.Order{
				ID: id, ProductID: "p1", UserID: fmt.Sprintf("u%d", id), Qty: 1, PriceCents: 100, CreatedMs: base + id}}
		}
		if err := w.Insert(ctx, batch); err != nil {
			t.Fatal(err)
		}
		sold, err := l.Sold(ctx, "p1")
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(10 * (i + 1)); sold != want {
			t.Fatalf("after insert %d the ledger read through the other replica sold %d, want %d", i+1, sold, want)
		}
	}
	// The catalogue likewise: a record written through one replica is
	// read through the other at once.
	for v := int64(1); v <= 5; v++ {
		if err := w.PutCatalog(ctx, CatalogRecord{ProductID: "p1", Kind: KindDegrade, On: v%2 == 1, Version: v, UpdatedMs: 1000 * v}); err != nil {
			t.Fatal(err)
		}
		recs, err := r.ReadCatalog(ctx, "p1")
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || recs[0].Version != v {
			t.Fatalf("catalogue read through the other replica after version %d: %+v", v, recs)
		}
	}
	// An earlier layout is migrated on both replicas of the shard.
	t.Run("MigratesEarlierLayout", func(t *testing.T) { migrateEarlierLayout(t, c) })
	// A replica that is down is skipped: the Distributed table reads the
	// one that answers.
	c.Stop(0)
	defer func() {
		if err := c.Start(0); err != nil {
			t.Error(err)
		}
	}()
	if sold, err := l.Sold(ctx, "p1"); err != nil || sold != 200 {
		t.Fatalf("with the first replica down: sold %d, %v; want 200", sold, err)
	}
}

// migrateEarlierLayout creates the cluster layout of a release before pay
// deadlines (no pay columns), stores two rows through it, and opens the
// store through two members at once: every member's tables get the
// columns, the old rows keep their meaning, new rows go in, and the next
// open queues no DDL.
func migrateEarlierLayout(t *testing.T, c *chtest.Cluster) {
	ctx := context.Background()
	db := freshDB()
	n := dial(t, c.Addrs()[0])
	zk := strings.NewReplacer("{database}", db, "{table}", "seckill_order_local").Replace(DefaultZooKeeperPath)
	cols := "(order_id UInt64, product_id String, user_id String, quantity UInt32, price Decimal(10,2), status UInt8, create_time DateTime, update_ms UInt64, edge UInt16)"
	dctx := ddlCtx(ctx, 20*time.Second)
	for _, q := range []string{
		"CREATE DATABASE " + db + " ON CLUSTER " + c.Name(),
		"CREATE TABLE " + db + ".seckill_order_local ON CLUSTER " + c.Name() + " " + cols +
			" ENGINE = ReplicatedReplacingMergeTree('" + zk + "', '{replica}', update_ms) PARTITION BY toYYYYMM(create_time) ORDER BY (product_id, order_id)",
		"CREATE TABLE " + db + ".seckill_order ON CLUSTER " + c.Name() + " " + cols +
			" ENGINE = Distributed(" + c.Name() + ", " + db + ", seckill_order_local, cityHash64(user_id))",
	} {
		if err := n.Exec(dctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	insertLegacy(t, n, db+".seckill_order")
	errs := make(chan error, 2)
	for _, a := range c.Addrs()[:2] {
		go func() {
			s, err := OpenClickHouse(ctx, a, db, ClickHouseOptions{Cluster: c.Name(), Timeout: 20 * time.Second})
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("open of the earlier layout: %v", err)
		}
	}
	for i, a := range c.Addrs() {
		for _, table := range []string{"seckill_order_local", "seckill_order"} {
			if got := count(t, dial(t, a), "SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name IN ('pay_time', 'expired', 'pay_by_ms')", db, table); got != 3 {
				t.Errorf("member %d: %s has %d of the 3 pay columns", i, table, got)
			}
		}
	}
	queue := "SELECT count() FROM system.zookeeper WHERE path = '/clickhouse/task_queue/ddl'"
	before := count(t, n, queue)
	s := openCluster(t, c, c.Addr(), db)
	if after := count(t, n, queue); after != before {
		t.Errorf("opening the migrated layout queued %d DDL statements", after-before)
	}
	if old, ok, err := s.Get(ctx, "p", 1); err != nil || !ok || old.Status != StatusPaid || old.PaidMs != 0 {
		t.Fatalf("an old stored order reads %+v %v %v, want paid", old, ok, err)
	}
	created := time.Date(2026, 11, 11, 0, 0, 0, 0, time.UTC).UnixMilli()
	e := order.Event{V: 1, Type: order.TypeOrder, Order: order.Order{ID: 3, ProductID: "p", UserID: "cid", Qty: 1, CreatedMs: created, PayByMs: created + 60_000}}
	paid := e
	paid.Type, paid.PaidMs = order.TypePaid, created+30_000
	if err := s.Insert(ctx, []Row{FromEvent(&e), FromEvent(&paid)}); err != nil {
		t.Fatal(err)
	}
	tot, err := s.Totals(ctx, "p")
	if want := (Totals{PaidOrders: 2, PaidUnits: 3, CancelledOrders: 1, CancelledUnits: 1, MaxUser: "ann", MaxUserUnits: 2}); err != nil || tot != want {
		t.Fatalf("totals %+v %v, want %+v", tot, err, want)
	}
}
