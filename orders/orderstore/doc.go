// Package orderstore is the ledger of the sale: every order event the
// consumer takes from Kafka becomes one row here, keyed by (product, order
// id), and its settlement — paid, or released by a cancel or the pay
// deadline — replaces the order's row. It is what reconcile checks Redis
// against and what warm-up rebuilds a sale from when Redis lost its memory
// (see Ledger).
//
// A row's status is the seed's: 0 unpaid (stored, the unit held until it is
// paid, cancelled or its deadline passes), 1 paid (kept for good; pay_time),
// 2 cancelled (the units went back; expired = 1 when the deadline released
// it). pay_by_ms is the order's pay deadline (0 = none). Rows written before
// pay deadlines existed carry status 1: an order was final once stored,
// which is what paid means now.
//
// Two implementations pass the same contract tests:
//
//   - ClickHouse (OpenClickHouse): table seckill_order, a ReplacingMergeTree
//     with version update_ms ordered by (product_id, order_id). A redelivered
//     event inserts an identical row and a release inserts the same key with
//     status 2 and a higher update_ms, so every query reads with FINAL and
//     sees exactly one row per order, the newest (a settlement's version
//     is always above its order's, order.Event.StoreVersion). Inserting is
//     therefore idempotent: the consumer retries a failed batch whole. SQL is kept to
//     what ClickHouse 18.16 (Debian) and current releases both accept; the
//     driver talks the native protocol and names the batch columns. New
//     tables are partitioned by month (toYYYYMM(create_time)), so that
//     retention drops whole months (clickhouse_retention.go: 18.16 has no
//     TTL). A ledger created before pay deadlines gets pay_time, expired
//     and pay_by_ms at open (ALTER TABLE ADD COLUMN, on every member of a
//     cluster); any other difference is refused. With
//     ClickHouseOptions.Cluster the tables are created ON CLUSTER:
//     seckill_order_local (ReplicatedReplacingMergeTree) on every
//     member and seckill_order, a Distributed table over them sharded by
//     cityHash64(user_id), written synchronously; the catalogue the same
//     way, sharded by product. An order's rows share its user and so a
//     shard, which makes FINAL through the Distributed table exact. With
//     several replicas per shard the ledger and the catalogue reads first
//     sync the replicas (SyncReplicas), which replicate asynchronously.
//   - File (OpenFile): the zero-setup default when no ClickHouse address is
//     configured. An append-only JSON-lines log, fsynced per write, loaded
//     into memory at open with the same "highest update_ms wins" rule. It is
//     for demos and single-node trials: one process at a time, the whole
//     ledger in memory, the file never compacted.
//
// Ledger is the read side for warm-up: after Redis lost a sale (and the
// edges waited until no event of the sale can still be on its way to
// Kafka, InFlight) it reads the orders topic's uncommitted tail (Tail: what
// Kafka acknowledged and the consumer group has not stored, returned for
// the caller to count; without it, it waits for the group to drain, Drain)
// and the units held (unpaid and paid), released and held per buyer
// (Buyers), the unpaid orders' deadlines (Deadlines) and, page by page, the
// settled orders (Settled), so that the sale reopens with exactly what is
// left, nobody can buy beyond the limit, every unpaid order still expires,
// and no order settled in the ledger is settled again in Redis.
//
// Catalog (catalog.go) is the durable sale catalogue beside the ledger:
// the activities created through the admin API, their restocks and the
// degrade switch, as versioned records (the newest of a key wins). Redis
// keeps the copy every edge reads; package sale writes here first and
// rebuilds that copy from here when Redis lost it. ClickHouse keeps it in
// seckill_catalog (ReplacingMergeTree(version) ordered by (product_id, kind,
// entry_id), read with FINAL), the file store in catalog.jsonl beside its
// order log.
//
// Row.CreatedMs is stored by ClickHouse as create_time DateTime, i.e. to the
// second; update_ms keeps milliseconds.
package orderstore
