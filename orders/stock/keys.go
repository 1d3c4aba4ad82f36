package stock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"flashgate/orders/order"
)

// Key layout. Every key of a product carries the product's hash tag {p} so
// that one script touches one slot and runs unchanged on Redis Cluster.
//
//	sk:{p}:stock        remaining units (string integer); absent = not warmed
//	sk:{p}:meta         hash: initial restocked released paid expired limit price
//	                    start end runid (the server the sale was verified on), tokens
//	                    (tokens expiring by then are refused), recovering
//	                    (the fence, see fence.go), quiet:<node>, layout ("2": the
//	                    buyers and used tokens are hashes, below; absent: per-key
//	                    keys), buyersset (the fence whose rebuild cleared the
//	                    buyer hashes, lua/set_buyers.lua)
//	sk:{p}:recover      the lock of the edge rebuilding a fenced sale
//	sk:{p}:u:<userId>   units bought by the user; TTL until sale end + BuyerGrace
//	                    (per-key layout)
//	sk:{p}:b:<shard>    hash: user -> units bought, for the users of one shard
//	                    (BuyerShard, 0..15); TTL until sale end + BuyerGrace
//	                    (layout "2")
//	sk:{p}:o:<orderId>  the order, a string written once with its TTL (OrderTTL):
//	                    "<c>:<user>:<qty>:<price>:<created>:<node>:<payby>", and
//	                    ":<paid>:<closed>" appended once settled (settle.go); see
//	                    below. An older version wrote a hash with the same fields
//	                    (state user qty price created node payby paid closed):
//	                    every reader takes both (orderval.go, lua/order_fn.lua)
//	sk:{p}:due          sorted set of the pay deadlines: score payby (unix ms),
//	                    member "<orderId>:<userId>" (settle.go)
//	sk:{p}:wh:<id>      a payment webhook's event id already seen; TTL the
//	                    webhook's replay window (Pay)
//	sk:{p}:t:<nonce>    a used one-time purchase token; TTL until it expires
//	                    (per-key layout)
//	sk:{p}:tk:<bucket>  hash: nonce -> "1", the used tokens expiring in that
//	                    10 s (expiresMs / 10000); TTL until the bucket's end
//	                    (layout "2")
//	sk:{p}:outbox       stream of order events (see the field* constants)
//	sk:{p}:relays       hash: outbox relay consumer -> unix ms it last read the outbox (outbox.go)
//	sk:catalog          hash: product id -> activity JSON (admin catalog)
//	sk:edges            hash: node id -> unix ms of its last heartbeat
//	sk:catalog:ver      hash: product id -> the entry's version (catalog.go)
//	sk:degrade          hash: product id -> "<version>:<0|1>" (degrade.go)
//	sk:degrade:all      "<version>:<0|1>": the degrade switch of every product
//	sk:{p}:wr, sk:{p}:wr:*  the sale's waiting room (waitroom.go has their layout)
//	sk:rl:{<client>}:<zone>  "<excess>:<last ms>": one client's limit_req state in
//	                    one zone, shared by every edge; TTL until idle (ratelimit.go)
//
// The order string. <c>, its first byte, is the state: p pending, s
// success (the open states, lower case: they hold units), P paid, E
// expired, R released, F failed (final, upper case). The other fields are
// decimal (times unix ms, price cents, node the edge's id; payby 0: no
// deadline), separated by ':', outside the user alphabet. Why a string: the
// deduction writes it with one SET PX instead of HSET + PEXPIRE, the
// consumer's success mark is one SETRANGE of byte 0 (it keeps the TTL and
// rewrites nothing), and a GET reads it whole; Redis' CPU per purchase is
// the sale's bound (bench/README, "Findings"). A settlement happens once
// per order and writes it again whole (SET KEEPTTL) with paid and closed.
// An order keeps its layout for life: a hash left by an older edge is
// changed with HSET, never turned into a string, so that an older edge
// still reading it during a rolling upgrade sees what it expects.
//
// The buyer and token layouts. A sale's buyer counts and used tokens are
// either one key each (sk:{p}:u:, sk:{p}:t:; every version understands
// them) or, layout "2", fields of per-product hashes (sk:{p}:b:, sk:{p}:tk:):
// deduct.lua then reads a whole group-commit batch's counts and marks with
// one HMGET per hash and writes them with one HSET (and one expiry) per
// hash, where the per-key layout makes two to three calls per attempt — the
// calls are Redis' CPU per purchase, the sale's bound. The buyers are 16
// hashes, not one: Redis 7.0 deletes or expires a big key synchronously, a
// pause of every product on that server, and a sale may have millions of
// buyers. The used tokens are one hash per 10 s of expiry times, so that the
// marks go when their tokens expire, as the per-token keys did: a single
// hash for a long sale would only grow. The span is short so that a bucket
// stays small — it holds every used token expiring in those 10 s, and Redis
// 7.0 frees an expired hash synchronously unless lazyfree-lazy-expire is set:
// at the ~30,000 purchases a second one Redis manages, 300,000 fields, a few
// ms — yet long enough that a batch's tokens, minted within token_ttl (60 s)
// of each other, fall in one to a few buckets. The layout is chosen when the sale is first
// warmed (warm.lua records it in the meta; Options.BuyerKeys keeps the
// per-key one while older edges, which know only sk:{p}:u: and sk:{p}:t:,
// serve the same Redis) and kept for the sale's life: every script reads
// it from the meta, in the same atomic call as the keys it decides about.
// A meta without "layout" (an older edge's sale) is the per-key layout.
//
// So the edge passes both layouts' keys to every script that touches them,
// and the script uses the ones its sale's layout names: the edge does not
// know a sale's layout without a round trip, and a layout it had cached
// could be stale (a sale Redis lost is warmed again by whichever edge gets
// there first). Per attempt that costs the deduction two small arguments
// (the shard and the bucket's index) beside the per-key names it already
// passed, and per batch the 16 shard names (precomputed per product) and
// one name per token bucket (usually one or two); the hash layout's
// figures in BenchmarkBuyerLayoutRedisCPU include that cost.
//
// The rate limit keys carry the client's hash tag instead of a product's:
// one client's limits are one slot, and clients spread over a cluster.
//
// The catalog, the edges and the degrade switches are not a product's keys:
// they have no hash tag and are only read and written whole-entry, one key
// per command or script.
//
// Broadcast channels (pubsub.go). On a standalone Redis (also behind
// Sentinel, and the embedded server) SoldOutChannel carries every product's
// sold-out broadcasts and ChangesChannel every product's order outcomes (see
// PublishStored). On Redis Cluster a keyless channel lives on one node (a
// client sends the PUBLISH to whichever node it picks, rueidis the master of
// slot 0): that node's failure would silence every product. There each
// product has its own sharded channel under its hash tag instead,
// SoldOutChannelOf and SettledChannelOf, so that its broadcasts ride on the
// node that serves its keys and a dead node silences only its own products:
//
//	sk:{p}:soldout      sharded channel (SPUBLISH/SSUBSCRIBE): p's sold-out broadcasts
//	sk:{p}:stored       sharded channel: p's order outcomes
//
// The messages are the same on both kinds of channel.
const (
	keyPrefix      = "sk:{"
	catalogKey     = "sk:catalog"
	SoldOutChannel = "sk:soldout"
	ChangesChannel = "sk:stored"
)

// Suffixes of the per-product sharded channels.
const (
	soldOutSuffix = "soldout"
	changesSuffix = "stored"
)

// SoldOutChannelOf is sk:{p}:soldout, p's sold-out channel on Redis Cluster.
func SoldOutChannelOf(product string) string { return prefix(product) + soldOutSuffix }

// ChangesChannelOf is sk:{p}:stored, p's order-outcome channel on Redis
// Cluster.
func ChangesChannelOf(product string) string { return prefix(product) + changesSuffix }

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
)

func prefix(product string) string { return keyPrefix + product + "}:" }

// StockKey is sk:{p}:stock.
func StockKey(product string) string { return prefix(product) + "stock" }

// MetaKey is sk:{p}:meta.
func MetaKey(product string) string { return prefix(product) + "meta" }

// OutboxKey is sk:{p}:outbox.
func OutboxKey(product string) string { return prefix(product) + "outbox" }

// BuyerKey is sk:{p}:u:<user>.
func BuyerKey(product, user string) string { return prefix(product) + "u:" + user }

// OrderKey is sk:{p}:o:<orderId>.
func OrderKey(product string, orderID int64) string {
	return prefix(product) + "o:" + strconv.FormatInt(orderID, 10)
}

// DueKey is sk:{p}:due, the product's pay deadlines.
func DueKey(product string) string { return prefix(product) + "due" }

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

// ReplayKey is sk:{p}:wh:<id>, a payment webhook event id already seen.
// The id's alphabet ([A-Za-z0-9_-], ValidReplayID) has no brace.
func ReplayKey(product, id string) string { return prefix(product) + "wh:" + id }

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

// TokenKey is sk:{p}:t:<nonceHex>.
func TokenKey(product, nonceHex string) string { return prefix(product) + "t:" + nonceHex }

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

// BuyerShardKey is sk:{p}:b:<shard>.
func BuyerShardKey(product string, shard int) string {
	return prefix(product) + "b:" + strconv.Itoa(shard)
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

// TokenBucketKey is sk:{p}:tk:<bucket>, the used tokens expiring in the
// same 10 s as expiresMs.
func TokenBucketKey(product string, expiresMs int64) string {
	return prefix(product) + "tk:" + strconv.FormatInt(expiresMs/tokenBucketMs, 10)
}

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

// checkProduct refuses a product id no key may be built from (ErrInvalid):
// every method that takes one checks it first.
func checkProduct(id string) error {
	if !order.ValidProductID(id) {
		return fmt.Errorf("%w: product %q", ErrInvalid, id)
	}
	return nil
}
