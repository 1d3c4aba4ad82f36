package stock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"flashgate/orders/order"
	"flashgate/orders/orderid"
)

// Every Redis key and channel name flashgate uses is built in this file,
// and only here (test/layout fails on a key literal anywhere else). A
// product's keys carry its hash tag {p}, so that one script touches one
// slot and runs unchanged on Redis Cluster; the catalog, the edges and the
// degrade switches have no tag and are read and written one key per
// command. Why the keys look as they do (the order string, the two buyer
// and token layouts, the token buckets' span, the channels on a cluster):
// docs/ledger.md.

// The product keys: sk:{p}:<suffix>[<id>]. keyPrefix + p + "}:" is
// prefix(p); each suffix names one key, or one family when an id follows.
const (
	keyPrefix = "sk:{"

	// sk:{p}:stock, string integer: the units left; absent = not warmed.
	// warm.lua creates it (SET NX), deduct.lua takes from it, settle.lua
	// gives back, Restock and lua/reopen.lua raise or lower it.
	stockSuffix = "stock"
	// sk:{p}:meta, hash: initial restocked released paid expired limit
	// price start end, runid (the server the sale was verified on), tokens
	// (tokens expiring by then are refused), recovering (the fence,
	// fence.go), quiet:<node>, layout ("2": buyers and used tokens are
	// hashes), buyersset. warm.lua writes it; the fence, the settle and the
	// rebuild scripts update it.
	metaSuffix = "meta"
	// sk:{p}:recover, string: the owner of the rebuild lock, a short lease
	// its holder renews (LockRecovery, RenewRecovery, lua/unlock.lua).
	recoverSuffix = "recover"
	// sk:{p}:u:<user>, string integer: units the user bought; TTL sale end
	// + BuyerGrace. Per-key layout: deduct.lua, settle.lua, set_buyers.lua.
	buyerSuffix = "u:"
	// sk:{p}:b:<shard>, hash: user -> units bought, for one BuyerShard;
	// TTL sale end + BuyerGrace. Layout "2": the same scripts as buyerSuffix.
	buyerShardSuffix = "b:"
	// sk:{p}:o:<orderId>, string (an older version's: hash) with its TTL
	// (OrderTTL): the order (orderval.go). deduct.lua creates it,
	// mark_success.lua marks it, settle.lua and fix_orders.lua rewrite it.
	orderSuffix = "o:"
	// sk:{p}:ob:<bucket>, hash: order id -> the order in the string
	// layout's value, for every order whose id's time falls in one
	// orderBucketMs (OrderBucketKey); TTL the bucket's end + OrderTTL at
	// least. Ledger "b" (ledgerBatches): deduct.lua writes one HSET per
	// bucket per call, mark_success.lua one per bucket per stored batch,
	// settle.lua, fix_orders.lua and resolve_unknown.lua rewrite fields.
	orderBucketSuffix = "ob:"
	// sk:{p}:due, sorted set: member dueMember, score the pay deadline (unix
	// ms). mark_success.lua adds, settle.lua removes, fix_orders.lua puts
	// back what a rebuild reopens.
	dueSuffix = "due"
	// sk:{p}:wh:<id>, string: a payment webhook event id already seen; TTL
	// the replay window. settle.lua, on Pay.
	replaySuffix = "wh:"
	// sk:{p}:t:<nonce>, string: a used one-time token; TTL until it
	// expires. Per-key layout: deduct.lua.
	tokenSuffix = "t:"
	// sk:{p}:tk:<bucket>, hash: nonce -> "1", the used tokens expiring in
	// one tokenBucketMs; TTL the bucket's end. Layout "2": deduct.lua.
	tokenBucketSuffix = "tk:"
	// sk:{p}:outbox, stream of order events (the field* constants below):
	// one per order, or in ledger "b" one per deduction call carrying all of
	// its orders (fieldOrders). deduct.lua and settle.lua append, AckOutbox
	// deletes, the relay reads.
	outboxSuffix = "outbox"
	// sk:{p}:relays, hash: outbox relay consumer -> unix ms it last read
	// the outbox. TakeOutbox writes, lua/forget_relays.lua prunes.
	relaysSuffix = "relays"
	// sk:{p}:wr and sk:{p}:wr:*: the waiting room, written by the
	// lua/room_*.lua scripts (room.go); they expire with the sale.
	roomSuffix = "wr"
	// sk:{p}:tl, sorted set: score a unix second, member one edge's record
	// of that second of the sale (opaque here; it starts with the node and
	// the second, so two never collide). AppendTimeline adds and trims it
	// (timeline.go); the sale report reads it.
	timelineSuffix = "tl"
)

// The waiting room's keys under sk:{p}:wr:.
const (
	// sk:{p}:wr:u:<user>, hash: id seq until, the shopper's one ticket.
	roomUserSuffix = ":u:"
	// sk:{p}:wr:pre, set: the pre-queue's ticket ids.
	roomPreSuffix = ":pre"
	// sk:{p}:wr:rank, sorted set: ticket id -> place, the lottery's result.
	roomRankSuffix = ":rank"
	// sk:{p}:wr:active, sorted set: ticket id -> session end, the admitted
	// shoppers who have not bought (max_active).
	roomActiveSuffix = ":active"
	// sk:{p}:wr:lock, string: the edge writing the lottery's ranks.
	roomLockSuffix = ":lock"
	// sk:{p}:wr:c:<id>, string: a proof-of-work challenge already used.
	roomChallengeSuffix = ":c:"
)

// The keys that are no product's: no hash tag.
const (
	// keySpace starts every key and channel name of flashgate's.
	keySpace = "sk:"
	// sk:catalog, hash: product id -> the sale's JSON (package sale owns
	// its format). PutCatalog and RestoreCatalog write it.
	catalogKey = "sk:catalog"
	// sk:catalog:ver, hash: product id -> the entry's version (catalog.go).
	catalogVersionKey = "sk:catalog:ver"
	// sk:edges, hash: node id -> unix ms of its last Heartbeat;
	// <node id>:start -> unix ms its process started; <node id>:stop -> unix
	// ms its last process exited gracefully (EdgeBeat, EdgeStopped).
	edgesKey = "sk:edges"
	// sk:degrade, hash: product id -> "<version>:<0|1>" (lua/degrade.lua).
	degradeKey = "sk:degrade"
	// sk:degrade:all, string "<version>:<0|1>": the switch of every product
	// (lua/degrade.lua).
	degradeAllKey = "sk:degrade:all"
	// sk:rl:{<client>}:<zone>, string "<excess>:<last ms>": one client's
	// limit_req state in one zone, shared by every edge; TTL until idle.
	// lua/ratelimit.lua (ratelimit.go). The hash tag is the client's.
	rateKeyPrefix = "sk:rl:{"
)

// The broadcast channels (pubsub.go). Standalone (also Sentinel and the
// embedded server): one keyless channel per kind for every product. On a
// cluster, one sharded channel per product under its hash tag, so that its
// broadcasts ride on the node serving its keys (docs/ledger.md).
const (
	// SoldOutChannel carries every product's sold-out broadcasts.
	SoldOutChannel = "sk:soldout"
	// ChangesChannel carries every product's order state changes.
	ChangesChannel = "sk:stored"

	soldOutSuffix = "soldout" // sk:{p}:soldout, SPUBLISH/SSUBSCRIBE
	changesSuffix = "stored"  // sk:{p}:stored, SPUBLISH/SSUBSCRIBE
)

func prefix(product string) string { return keyPrefix + product + "}:" }

// SoldOutChannelOf is sk:{p}:soldout, p's sold-out channel on Redis Cluster.
func SoldOutChannelOf(product string) string { return prefix(product) + soldOutSuffix }

// ChangesChannelOf is sk:{p}:stored, p's state-change channel on Redis
// Cluster.
func ChangesChannelOf(product string) string { return prefix(product) + changesSuffix }

// channelKind is one kind of broadcast: its keyless channel and the suffix
// of its per-product sharded ones.
type channelKind struct {
	keyless string // standalone: one channel for every product
	suffix  string // cluster: sk:{p}:<suffix>
}

// of is the kind's sharded channel of product.
func (k channelKind) of(product string) string { return prefix(product) + k.suffix }

var (
	soldOutKind = channelKind{SoldOutChannel, soldOutSuffix}
	changesKind = channelKind{ChangesChannel, changesSuffix}
)

// StockKey is sk:{p}:stock.
func StockKey(product string) string { return prefix(product) + stockSuffix }

// MetaKey is sk:{p}:meta.
func MetaKey(product string) string { return prefix(product) + metaSuffix }

// OutboxKey is sk:{p}:outbox.
func OutboxKey(product string) string { return prefix(product) + outboxSuffix }

// RelaysKey is sk:{p}:relays, the hash of the relay consumers alive on the
// product's outbox: consumer name -> unix ms of its last TakeOutbox. It
// expires when no relay has read the outbox for the keepAlive TakeOutbox
// was given.
func RelaysKey(product string) string { return prefix(product) + relaysSuffix }

// TimelineKey is sk:{p}:tl, the edges' per-second records of the sale.
func TimelineKey(product string) string { return prefix(product) + timelineSuffix }

// RecoverKey is sk:{p}:recover, the lock of the edge rebuilding the sale
// (exported for the tests that watch who holds it).
func RecoverKey(product string) string { return prefix(product) + recoverSuffix }

// BuyerKey is sk:{p}:u:<user>.
func BuyerKey(product, user string) string { return prefix(product) + buyerSuffix + user }

// OrderKey is sk:{p}:o:<orderId>.
func OrderKey(product string, orderID int64) string {
	return orderKeyPrefix(product) + strconv.FormatInt(orderID, 10)
}

// orderKeyPrefix is sk:{p}:o:, what every OrderKey of p starts with.
func orderKeyPrefix(product string) string { return prefix(product) + orderSuffix }

// OrderBucketKey is sk:{p}:ob:<bucket>, the hash that holds order orderID
// in ledger "b": the bucket follows from the id's time (orderid.Time), so a
// lookup by id needs no index.
func OrderBucketKey(product string, orderID int64) string {
	return prefix(product) + orderBucketSuffix + strconv.FormatInt(OrderBucket(orderID), 10)
}

// orderBucketKeyPrefix is sk:{p}:ob:, what every OrderBucketKey of p
// starts with.
func orderBucketKeyPrefix(product string) string { return prefix(product) + orderBucketSuffix }

// OrderBucket is the number of orderID's bucket: the id's milliseconds
// since orderid.Epoch (orderid.Time) over orderBucketMs.
func OrderBucket(orderID int64) int64 {
	return (orderid.Time(orderID).UnixMilli() - orderid.Epoch.UnixMilli()) / orderBucketMs
}

// orderBucketExpireAtMs is when bucket's hash may go at the earliest, for
// an order written into it at nowMs: ttl after the later of the bucket's
// end (its last order id's time) and nowMs (unix ms).
func orderBucketExpireAtMs(bucket, nowMs, ttl int64) int64 {
	return max(orderid.Epoch.UnixMilli()+(bucket+1)*orderBucketMs, nowMs) + ttl
}

// orderBucketKey appends OrderBucketKey of bucket to the batch's buffer.
func (b *batch) orderBucketKey(p *product, bucket int64) {
	b.num(p.prefix, orderBucketSuffix, bucket)
}

// DueKey is sk:{p}:due, the product's pay deadlines.
func DueKey(product string) string { return prefix(product) + dueSuffix }

// ReplayKey is sk:{p}:wh:<id>, a payment webhook event id already seen.
// The id's alphabet ([A-Za-z0-9_-], ValidReplayID) has no brace.
func ReplayKey(product, id string) string { return prefix(product) + replaySuffix + id }

// TokenKey is sk:{p}:t:<nonceHex>.
func TokenKey(product, nonceHex string) string { return prefix(product) + tokenSuffix + nonceHex }

// BuyerShardKey is sk:{p}:b:<shard>.
func BuyerShardKey(product string, shard int) string {
	return prefix(product) + buyerShardSuffix + strconv.Itoa(shard)
}

// TokenBucketKey is sk:{p}:tk:<bucket>, the used tokens expiring in the
// same 10 s as expiresMs.
func TokenBucketKey(product string, expiresMs int64) string {
	return prefix(product) + tokenBucketSuffix + strconv.FormatInt(expiresMs/tokenBucketMs, 10)
}

// productKeys are the keys the deduction names in every call of one
// product, built once (deduct.go, Store.product), and the per-key names'
// prefixes it sends once a call: deduct.lua appends the user, order id or
// nonce only for a sale of the per-key layouts.
type productKeys struct {
	prefix                       string // sk:{p}:
	stockKey, outboxKey, metaKey string
	shardKeys                    []string // sk:{p}:b:0..15
	// sk:{p}:u:, sk:{p}:o:, sk:{p}:t: (BuyerKey, OrderKey, TokenKey
	// without the user, id or nonce)
	buyerPre, orderPre, tokenPre string
}

func keysOf(product string) productKeys {
	return productKeys{prefix: prefix(product), stockKey: StockKey(product), outboxKey: OutboxKey(product),
		metaKey: MetaKey(product), shardKeys: buyerShardKeys(product),
		buyerPre: BuyerKey(product, ""), orderPre: orderKeyPrefix(product), tokenPre: TokenKey(product, "")}
}

// tokenBucketKey appends TokenBucketKey of bucket (expiresMs /
// tokenBucketMs) to the batch's buffer.
func (b *batch) tokenBucketKey(p *product, bucket int64) {
	b.num(p.prefix, tokenBucketSuffix, bucket)
}

// roomKey is sk:{p}:wr, the room's hash: key commit (the lottery's), frozen
// members ranked (the opening), fifo joined (counters), base basems rate
// paused closed (the admission line), admitted (shoppers let in).
func roomKey(product string) string { return prefix(product) + roomSuffix }

func roomUserKey(product, user string) string { return roomKey(product) + roomUserSuffix + user }
func roomPreKey(product string) string        { return roomKey(product) + roomPreSuffix }
func roomRankKey(product string) string       { return roomKey(product) + roomRankSuffix }
func roomActiveKey(product string) string     { return roomKey(product) + roomActiveSuffix }
func roomLockKey(product string) string       { return roomKey(product) + roomLockSuffix }

// roomChallengeKey is sk:{p}:wr:c:<id>; id "-" names no challenge (the
// join script is given a key either way).
func roomChallengeKey(product, id string) string {
	return roomKey(product) + roomChallengeSuffix + id
}

// rateKeys is sk:rl:{<client>}:<zone> for each of zones.
func rateKeys(client string, zones []string) []string {
	keys := make([]string, len(zones))
	tag := rateKeyPrefix + client + "}:"
	for i, z := range zones {
		keys[i] = tag + z
	}
	return keys
}

// productKeyRest is what follows sk:{p}: in a product's key ("" and false
// for any other key).
func productKeyRest(key string) (string, bool) {
	if !strings.HasPrefix(key, keyPrefix) {
		return "", false
	}
	end := strings.IndexByte(key, '}')
	if end < 0 || !strings.HasPrefix(key[end:], "}:") {
		return "", false
	}
	return key[end+2:], true
}

// A route's waiting room (routeroom.go, lua/route_room_*.lua): its keys
// carry the room's name as their hash tag, sk:room:{<name>}:<suffix>, so
// every script of one room is one slot.
const (
	routeRoomPrefix = "sk:room:{"
	// sk:room:{r}:st, hash: method rate cap (the operator's overrides of
	// the config), credit creditms (the admission rate's bucket), seq (the
	// fifo numbers given), joined admitted abandoned ended over (counters;
	// over: passthrough visitors the rules would have queued), occ occn
	// occms (the seats' occupancy, ms, and their count, decayed over 60 s,
	// at occms: lua/route_room_seats.lua).
	routeRoomStateSuffix = "st"
	// sk:room:{r}:q, sorted set: visitor id -> place score (fifo: the
	// arrival number; random: the lottery's score), the waiting visitors.
	routeRoomQueueSuffix = "q"
	// sk:room:{r}:seen, sorted set: visitor id -> unix ms of their last
	// poll; who is not seen for the room's abandon time loses the place.
	routeRoomSeenSuffix = "seen"
	// sk:room:{r}:act, sorted set: visitor id -> session end (unix ms),
	// the admitted visitors, which max_active counts; a score ending in .5
	// is a seat reserved for the next in line until then, not yet claimed.
	routeRoomActiveSuffix = "act"
	// sk:room:{r}:since, hash: visitor id -> unix ms their seat was taken
	// (admitted or reserved), for the seats' mean occupancy.
	routeRoomSinceSuffix = "since"
	// sk:room:{r}:c:<challenge id>, string "1" until the challenge expires:
	// a proof of work spent by the visit that placed its visitor (single use).
	routeRoomChallengeSuffix = "c:"
)

// The route rooms' broadcasts (routeroom.go): who a seat was reserved for,
// whose session the origin ended. Standalone: one keyless channel for every
// room; on a cluster one sharded channel per room, sk:{<name>}:roomwake, in
// the slot of the room's keys (their hash tag is the name too).
const (
	RouteRoomChannel    = "sk:roomwake"
	routeRoomWakeSuffix = "roomwake"
)

var routeRoomKind = channelKind{RouteRoomChannel, routeRoomWakeSuffix}

// routeRoomChallengeKey is the key that spends a route room's challenge.
func routeRoomChallengeKey(name, challengeID string) string {
	return routeRoomPrefix + name + "}:" + routeRoomChallengeSuffix + challengeID
}

// RouteRoomKeys are a route room's keys, in the order its scripts take them.
type RouteRoomKeys struct{ State, Queue, Seen, Active, Since string }

func routeRoomKeys(name string) RouteRoomKeys {
	p := routeRoomPrefix + name + "}:"
	return RouteRoomKeys{State: p + routeRoomStateSuffix, Queue: p + routeRoomQueueSuffix,
		Seen: p + routeRoomSeenSuffix, Active: p + routeRoomActiveSuffix, Since: p + routeRoomSinceSuffix}
}

// isRoomKey reports whether k is a waiting-room key (sk:{p}:wr...).
func isRoomKey(k string) bool {
	i := strings.Index(k, "}:")
	return i > 0 && strings.HasPrefix(k[i+2:], roomSuffix)
}

// snapshotted reports whether the embedded server's snapshot keeps k:
// flashgate's keys, except the rate limits and the waiting rooms (lost on
// restart, like a local limiter's zone and a demo's queue).
func snapshotted(k string) bool {
	return strings.HasPrefix(k, keySpace) && !strings.HasPrefix(k, rateKeyPrefix) && !isRoomKey(k) &&
		!strings.HasPrefix(k, routeRoomPrefix)
}

// lostKind tells the keys a snapshot that is not clean cannot be trusted
// with: "stock" for sk:{p}:stock (stale high: sales since the save are
// forgotten), "buyer" for sk:{p}:u:<user> and the buyer hashes
// sk:{p}:b:<shard> (stale low), "" for the rest.
// Everything else is kept: the meta (initial, restocked — what the rebuild
// starts from), the catalog, order hashes and the due set (corrected by the
// rebuild), the
// outbox streams (events that may not have reached Kafka: the relay sends
// them again, the consumer drops duplicates, the rebuild counts them), and
// used tokens.
func lostKind(key string) string {
	rest, ok := productKeyRest(key)
	switch {
	case !ok:
	case rest == stockSuffix:
		return "stock"
	case strings.HasPrefix(rest, buyerSuffix), strings.HasPrefix(rest, buyerShardSuffix):
		return "buyer"
	}
	return ""
}

// Outbox entry fields, written by the deduction and settle scripts and
// parsed by OutboxEntry.Order and OutboxEntry.Event.
const (
	fieldType     = "type"     // the event type; absent = order.TypeOrder
	fieldReason   = "reason"   // a release's reason (order.Reason*)
	fieldReleased = "released" // a release's time, Redis clock, unix ms
	fieldPaid     = "paid"     // a payment's time, Redis clock, unix ms
	fieldPayBy    = "payby"    // the pay deadline, unix ms; absent or 0 = none
	fieldOrder    = "order"    // order id, decimal
	fieldProduct  = "product"  // product id
	fieldUser     = "user"     // user id
	fieldQty      = "qty"      // units
	fieldPrice    = "price"    // unit price in cents
	fieldCreated  = "created"  // edge clock, unix ms
	fieldNode     = "node"     // edge node id
	// fieldOrders, in ledger "b" the one field besides fieldProduct of a
	// deduction's entry: its orders, each
	// "<id>:<user>:<qty>:<price>:<created>:<node>:<payby>", joined by ';'
	// (neither is in the user alphabet).
	fieldOrders = "orders"
)

// dueMember is the member of an order in DueKey: the order id and its
// buyer, so that a sweep can declare the order's and the buyer's keys
// without reading the order first (':' is outside the user alphabet).
func dueMember(orderID int64, user string) string {
	return strconv.FormatInt(orderID, 10) + ":" + user
}

// parseDueMember splits a DueKey member; ok is false when it is not one.
func parseDueMember(m string) (orderID int64, user string, ok bool) {
	idText, user, found := strings.Cut(m, ":")
	id, err := strconv.ParseInt(idText, 10, 64)
	if !found || err != nil || id <= 0 || !order.ValidUserID(user) {
		return 0, "", false
	}
	return id, user, true
}

// MaxReplayIDLen bounds a webhook event id.
const MaxReplayIDLen = 64

// ValidReplayID reports whether id is a webhook event id: [A-Za-z0-9_-]{1,64}.
func ValidReplayID(id string) bool {
	if id == "" || len(id) > MaxReplayIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// BuyerShards is the number of buyer hashes per product (layout "2").
const BuyerShards = 16

// layoutHashes is the meta's layout field of a sale whose buyers and used
// tokens are hashes.
const layoutHashes = "2"

// buyersArg is the warm and rebuild scripts' argument for
// Options.BuyerKeys: the layout a sale they create is given.
func buyersArg(perKey bool) string {
	if perKey {
		return ""
	}
	return layoutHashes
}

// ledgerBatches is the meta's ledger field of a sale whose orders live in
// per-bucket hashes (OrderBucketKey) and whose deductions write one outbox
// entry per call (docs/ledger.md); absent: one key and one entry per order.
const ledgerBatches = "b"

// ledgerArg is the warm and rebuild scripts' argument for
// Options.OrderKeys: the ledger a sale they create is given.
func ledgerArg(perOrder bool) string {
	if perOrder {
		return ""
	}
	return ledgerBatches
}

// orderBucketMs is the span of order id times of one order bucket hash: at
// 30,000 orders a second, 300,000 fields, a few ms for Redis to free.
const orderBucketMs = 10_000

// tokenBucketMs is the span of expiry times of one used-token hash
// (lua/deduct.lua has the same number: the bucket's end is its TTL).
const tokenBucketMs = 10_000

// BuyerShard is the buyer hash that holds user's count: FNV-1a of the id,
// low 4 bits. Stable across versions and edges: changing it would lose
// every count written before.
func BuyerShard(user string) int {
	h := uint32(2166136261)
	for i := 0; i < len(user); i++ {
		h ^= uint32(user[i])
		h *= 16777619
	}
	return int(h & (BuyerShards - 1))
}

// buyerShardKeys is the product's BuyerShardKey names, in shard order.
func buyerShardKeys(product string) []string {
	keys := make([]string, BuyerShards)
	for i := range keys {
		keys[i] = BuyerShardKey(product, i)
	}
	return keys
}

// shardArgs are the shard numbers as script arguments.
var shardArgs = func() (a [BuyerShards]string) {
	for i := range a {
		a[i] = strconv.Itoa(i)
	}
	return a
}()

// ErrInvalid is wrapped by every argument error; nothing was sent to Redis.
// Product and user ids are checked with order.ValidProductID and
// order.ValidUserID, whose alphabet has no brace: a brace inside an id would
// move the hash tag, and keys of one sale could land in different slots.
var ErrInvalid = errors.New("stock: invalid argument")

const maxNonceLen = 128

func validNonce(n string) bool {
	if n == "" || len(n) > maxNonceLen {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// checkProduct refuses a product id no key may be built from (ErrInvalid).
// Each exported method that takes a product id checks it once, first; the
// unexported helpers it calls take the id as checked.
func checkProduct(id string) error {
	if !order.ValidProductID(id) {
		return fmt.Errorf("%w: product %q", ErrInvalid, id)
	}
	return nil
}
