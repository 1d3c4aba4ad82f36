package room

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math/bits"
	"sync"
	"time"

	"flashgate/orders/order"
)

// The proof-of-work challenge a shopper solves before joining a sale's queue
// (bot friction, optional per sale).
//
// The edge issues a challenge (GET /api/seckill/challenge); the page finds a
// decimal nonce such that SHA-256(challenge + ":" + nonce) starts with at
// least difficulty zero bits (static/site/pow.js, in a Web Worker) and sends
// both with the join. Finding the nonce costs the browser 2^difficulty hashes
// on average; checking it costs the edge one SHA-256 and one HMAC, no state
// and no allocation. Any edge checks a challenge another edge issued, given
// the same secret.
//
// Layout, base64url without padding (MinChallengeLen..MaxChallengeLen
// characters):
//
//	version (1) | difficulty (1) | len(product) (1) | id (12) |
//	expiresMs (8, big-endian) | product | len(user) (1) | user | tag (16)
//	tag = HMAC-SHA256(key, everything before it)[:16]
//	key = HMAC-SHA256(secret, "flashgate waitroom challenge v1")
//
// The key is derived so that the secret may be the one that signs purchase
// tokens: no challenge can ever be mistaken for a token, or the other way
// round. The user and product travel in the challenge (to that same user), so
// that a genuine challenge presented by another user or for another sale is
// told apart from a forged one (ErrChallengeWrongUser,
// ErrChallengeWrongProduct instead of ErrChallengeForged). The difficulty is
// signed too: the work a challenge asks for is fixed when it is issued, and a
// change of the sale's difficulty applies to the challenges issued after it
// (at most one TTL later, every challenge asks for the new one).
//
// # Replay: the contract with the join script
//
// Verify is stateless: it accepts a solved challenge any number of times
// until it expires. A challenge is spent by the join it was sent with: the
// join script (orders/stock/lua/room_join.lua), in the same round trip as the
// join, must
//
//	SET sk:{<product>}:wr:c:<ChallengeID(challenge)> 1 NX PXAT <ChallengeExpiresMs(challenge)>
//
// and refuse the join (403 BAD_CHALLENGE, nothing else written) when the key
// already exists. A challenge is bound to one user and one sale, and the
// script answers a shopper who already has a place with that place before it
// looks at the challenge (a retried join whose first answer was lost gets
// its place, not a refusal). So "replayed" means: a challenge already spent
// by a join, presented again for a join that would create a place (another
// shopper cannot present it at all: ErrChallengeWrongUser). It is refused,
// and the page asks for a fresh challenge. The key lives until the challenge
// expires and no longer: after that Verify refuses the challenge as
// ErrChallengeExpired by itself, so the keys never outnumber the joins of one
// TTL. Ids are 96 bits from crypto/rand, unique across edges without
// coordination.

const (
	// MaxChallengeDifficulty is the most leading zero bits a challenge may
	// ask for: 2^32 hashes is about an hour in a desktop browser, so more is
	// never a setting.
	MaxChallengeDifficulty = 32
	// ChallengeTTL is how long a challenge is accepted after it was issued.
	// At 20 bits (2^20 hashes on average) headless Chromium on a 2-core
	// server takes about 0.6 s (1.5-2 million hashes a second,
	// test/browser/pow_test.go); a phone ten times slower needs 6 s on
	// average and, the tries being geometric, more than k times that with
	// probability e^-k: two minutes is ample, and short enough that a stock
	// of solved challenges goes stale.
	ChallengeTTL = 2 * time.Minute
	// ChallengeIDLen is the length of ChallengeID's answer (base64url characters).
	ChallengeIDLen = 16
	// MaxChallengeNonceLen bounds the nonce: up to 20 decimal digits (any uint64).
	MaxChallengeNonceLen = 20
	// MinChallengeLen and MaxChallengeLen bound what Verify reads.
	MinChallengeLen = (minRaw*8 + 5) / 6
	MaxChallengeLen = (maxRaw*8 + 5) / 6

	challengeVersion = 1
	idBytes          = 12
	challengeTagLen  = 16
	offID            = 3
	offExpiry        = offID + idBytes
	offProduct       = offExpiry + 8
	minRaw           = offProduct + 1 + 1 + 1 + challengeTagLen
	maxRaw           = offProduct + order.MaxProductIDLen + 1 + order.MaxUserIDLen + challengeTagLen
)

// Errors returned by Verify, one per reason, so the join can log why it
// refused (the shopper sees BAD_CHALLENGE for all of them).
var (
	ErrChallengeMalformed        = errors.New("waitroom: malformed challenge")
	ErrChallengeForged           = errors.New("waitroom: challenge not issued by this edge's secret")
	ErrChallengeWrongUser        = errors.New("waitroom: challenge issued to another user")
	ErrChallengeWrongProduct     = errors.New("waitroom: challenge issued for another sale")
	ErrChallengeExpired          = errors.New("waitroom: challenge expired")
	ErrChallengeBadNonce         = errors.New("waitroom: nonce is not 1 to 20 decimal digits")
	ErrChallengeInsufficientWork = errors.New("waitroom: nonce does not solve the challenge")
)

// challengeKDFLabel separates the challenge key from every other use of the
// secret.
var challengeKDFLabel = []byte("flashgate waitroom challenge v1")

// b64 is strict so that a challenge has one accepted spelling; CR and LF,
// which the decoder skips even then, are refused by the alphabet check.
var challengeB64 = base64.RawURLEncoding.Strict()

// Challenger issues and verifies challenges. It is safe for concurrent use.
type Challenger struct {
	key  []byte
	ttl  time.Duration
	pool sync.Pool // of *challengeState
}

// challengeState is what one Issue or Verify writes to. It is pooled because
// the HMAC is costly to build and because a buffer passed to a hash.Hash
// method (or to crypto/rand) escapes to the heap, so none can be a local.
type challengeState struct {
	mac  hash.Hash
	work hash.Hash
	raw  [maxRaw]byte
	out  [MaxChallengeLen]byte
	sum  [sha256.Size]byte
}

var challengeColon = []byte{':'}

// NewChallenger returns a Challenger whose challenges live ChallengeTTL.
// The secret is not kept, only the key derived from it. Its strength is the
// caller's to check, with the field's name: the edge passes
// sale.token_secret, which its config validation holds to at least 32 bytes
// (the purchase tokens' minimum). NewChallenger itself never fails, so that
// a config that is refused anyway cannot crash the edge here.
func NewChallenger(secret []byte) *Challenger {
	return newChallenger(secret, ChallengeTTL)
}

// WithTTL returns a Challenger with the same key whose challenges live ttl
// (ChallengeTTL when ttl <= 0). Challenges of one are valid for the other:
// the expiry is in the challenge.
func (c *Challenger) WithTTL(ttl time.Duration) *Challenger {
	if ttl <= 0 {
		ttl = ChallengeTTL
	}
	return newChallenger(nil, ttl).withKey(c.key)
}

func newChallenger(secret []byte, ttl time.Duration) *Challenger {
	c := &Challenger{ttl: ttl}
	if secret == nil {
		return c
	}
	kdf := hmac.New(sha256.New, secret)
	kdf.Write(challengeKDFLabel)
	return c.withKey(kdf.Sum(nil))
}

func (c *Challenger) withKey(key []byte) *Challenger {
	c.key = key
	c.pool.New = func() any {
		return &challengeState{mac: hmac.New(sha256.New, c.key), work: sha256.New()}
	}
	return c
}

// TTL is how long the challenges Issue writes are accepted.
func (c *Challenger) TTL() time.Duration { return c.ttl }

// CheckChallengeDifficulty reports whether d is a difficulty a sale may ask
// for: 0 (no challenge) up to MaxChallengeDifficulty.
func CheckChallengeDifficulty(d int) error {
	if d < 0 || d > MaxChallengeDifficulty {
		return fmt.Errorf("challenge difficulty %d is not in 0..%d (leading zero bits of SHA-256)", d, MaxChallengeDifficulty)
	}
	return nil
}

// Issue returns a challenge for user and product asking for difficulty
// leading zero bits, accepted until nowMs + TTL (Unix milliseconds,
// exclusive). The string is printable (base64url) and needs no escaping in
// JSON, a URL or a header. Its one allocation is the string.
//
// user and product are the verified session's subject and a known product
// id, and the difficulty comes from a validated config; should one be
// invalid all the same (a difficulty outside 0..MaxChallengeDifficulty), the
// answer is "", which no Verify accepts: a refused join, not a panic in a
// request handler.
func (c *Challenger) Issue(user, product []byte, difficulty int, nowMs int64) string {
	if CheckChallengeDifficulty(difficulty) != nil || !order.ValidUserID(user) || !order.ValidProductID(product) {
		return ""
	}
	st := c.pool.Get().(*challengeState)
	defer c.pool.Put(st)
	r := st.raw[:0]
	r = append(r, challengeVersion, byte(difficulty), byte(len(product)))
	r = r[:offExpiry]
	// crypto/rand: the vDSO getrandom on Linux, cheap, allocation-free
	// here and never failing; the id must be unguessable only in so far as
	// it must not collide, which 96 random bits ensure.
	rand.Read(r[offID:offExpiry])
	r = binary.BigEndian.AppendUint64(r, uint64(nowMs+c.ttl.Milliseconds()))
	r = append(r, product...)
	r = append(r, byte(len(user)))
	r = append(r, user...)
	st.tag(r)
	r = append(r, st.sum[:challengeTagLen]...)
	n := challengeB64.EncodedLen(len(r))
	challengeB64.Encode(st.out[:n], r)
	return string(st.out[:n])
}

// Verify checks that nonce solves challenge and that challenge was issued by
// this Challenger's key to user for product and has not expired at nowMs.
// It allocates nothing. The checks run in this order, and the first that
// fails is the error: the form of both inputs (ErrChallengeMalformed, ErrChallengeBadNonce),
// the tag (ErrChallengeForged), then — trusting what the challenge says only once the
// tag holds — the product (ErrChallengeWrongProduct), the user (ErrChallengeWrongUser), the
// expiry (ErrChallengeExpired) and the work (ErrChallengeInsufficientWork).
func (c *Challenger) Verify(challenge, nonce, user, product []byte, nowMs int64) error {
	if len(challenge) < MinChallengeLen || len(challenge) > MaxChallengeLen {
		return ErrChallengeMalformed
	}
	for _, ch := range challenge {
		if !isChallengeChar(ch) {
			return ErrChallengeMalformed
		}
	}
	if len(nonce) == 0 || len(nonce) > MaxChallengeNonceLen {
		return ErrChallengeBadNonce
	}
	for _, ch := range nonce {
		if ch < '0' || ch > '9' {
			return ErrChallengeBadNonce
		}
	}
	st := c.pool.Get().(*challengeState)
	defer c.pool.Put(st)
	n, err := challengeB64.Decode(st.raw[:], challenge)
	if err != nil {
		return ErrChallengeMalformed
	}
	r := st.raw[:n]
	pl := int(r[2])
	if r[0] != challengeVersion || pl == 0 || pl > order.MaxProductIDLen || offProduct+pl+1 > n {
		return ErrChallengeMalformed
	}
	ul := int(r[offProduct+pl])
	body := offProduct + pl + 1 + ul
	if ul == 0 || ul > order.MaxUserIDLen || body+challengeTagLen != n {
		return ErrChallengeMalformed
	}
	st.tag(r[:body])
	if !hmac.Equal(st.sum[:challengeTagLen], r[body:]) {
		return ErrChallengeForged
	}
	if string(r[offProduct:offProduct+pl]) != string(product) { // compared in place, no allocation
		return ErrChallengeWrongProduct
	}
	if string(r[offProduct+pl+1:body]) != string(user) {
		return ErrChallengeWrongUser
	}
	if nowMs >= int64(binary.BigEndian.Uint64(r[offExpiry:offProduct])) {
		return ErrChallengeExpired
	}
	d := int(r[1])
	if d > MaxChallengeDifficulty { // signed with our key, so never; but never trust a shift count
		return ErrChallengeMalformed
	}
	st.work.Reset()
	st.work.Write(challenge)
	st.work.Write(challengeColon)
	st.work.Write(nonce)
	st.work.Sum(st.sum[:0])
	if !hasLeadingZeroBits(st.sum[:], d) {
		return ErrChallengeInsufficientWork
	}
	return nil
}

// hasLeadingZeroBits reports whether sum starts with at least d zero bits,
// d in 0..32: the first four bytes decide.
func hasLeadingZeroBits(sum []byte, d int) bool {
	return bits.LeadingZeros32(binary.BigEndian.Uint32(sum)) >= d
}

// ChallengeID returns the challenge's id, the key of its single use (see the
// replay contract above): ChallengeIDLen base64url characters, a sub-slice of
// challenge, nil when challenge is too short to be one. Call it on a
// challenge Verify accepted; it checks nothing itself.
func ChallengeID(challenge []byte) []byte {
	// The id starts at raw byte 3 and is 12 bytes long, both multiples of
	// three, so its base64 is exactly characters 4..20 of the challenge.
	if len(challenge) < MinChallengeLen {
		return nil
	}
	return challenge[offID/3*4 : offExpiry/3*4]
}

// ChallengeExpiresMs returns when the challenge stops being accepted (Unix
// milliseconds, exclusive), the PXAT of its replay key; ok is false when
// challenge is too short or not base64url there. Like ChallengeID it trusts
// the challenge: call it after Verify.
func ChallengeExpiresMs(challenge []byte) (ms int64, ok bool) {
	// The expiry is raw bytes 15..23; characters 20..32 are raw bytes 15..24.
	const from, to = offExpiry / 3 * 4, (offProduct + 1) / 3 * 4
	if len(challenge) < MinChallengeLen {
		return 0, false
	}
	var raw [(to - from) / 4 * 3]byte
	if _, err := challengeB64.Decode(raw[:], challenge[from:to]); err != nil {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(raw[:8])), true
}

// tag computes the MAC of b into st.sum.
func (st *challengeState) tag(b []byte) {
	st.mac.Reset()
	st.mac.Write(b)
	st.mac.Sum(st.sum[:0])
}

func isChallengeChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}
