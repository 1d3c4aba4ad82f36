package session

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"flashgate/orders/order"
)

// A shopper sends the same session with every call (the token, the
// purchase, each result or queue poll), and a full Verify (the MAC, two
// base64 segments, the claims) costs ~10 times a table look-up. So a Codec
// remembers the tokens it verified, bounded and exact:
//
//   - Only a token that passed every check is remembered, with what it says
//     (sub, exp, nbf); a forged or malformed one never is.
//   - A hit needs the presented token to be byte for byte a remembered one
//     (compared in full, in time that depends only on its length; the hash
//     only says where to look): the same bytes carry the same signature and
//     claims, so the answer is the one the full check would give. exp and
//     nbf are compared with the clock on every hit, as the full check does.
//   - The table belongs to its Codec, whose secrets never change: a config
//     with other secrets builds another Codec, and tokens of a dropped
//     secret are checked in full again.
//   - It is direct-mapped (a slot per hash of the token, with a seed of its
//     own per Codec, so no one can aim tokens at a slot): a new token
//     replaces the slot's old one, which is then checked in full next time.
//     Its size is fixed: 8192 slots of 352 bytes and two 64 KB arrays of
//     tags, 3 MB per Codec.
//   - A token is remembered the second time it passes, not the first: a
//     stream of sessions seen once each (a load test's fresh shoppers, or
//     someone cycling through valid sessions) costs a tag store each and
//     evicts nothing. A shopper's first call is checked in full, the second
//     too, the rest are answered from the table.
//
// Each slot has its own mutex, held while its bytes are compared or
// written (some tens of ns, never across anything that blocks). A lock-free
// slot would need an atomic store per 8 bytes of token on every insert (Go
// has no relaxed atomics for a race-free seqlock); with 8192 slots two
// requests meet on one only when they carry the same session or collide.
// The tags (part of the hash) live apart from the slots so that a miss,
// the common case for a new session, reads 8 bytes of a small array
// instead of a slot that is not in the CPU's cache.
const (
	cacheSlots    = 1 << 13
	cacheTokenMax = 256 // longer tokens (a 64-byte sub fits) are not remembered
)

type cacheSlot struct {
	mu     sync.Mutex
	n      uint16 // token length; 0: empty
	subLen uint8
	hasNbf bool
	exp    int64
	nbf    int64
	tok    [cacheTokenMax]byte
	sub    [order.MaxUserIDLen]byte
}

type verifiedCache struct {
	seed  maphash.Seed
	slots []cacheSlot
	// held[i] is the tag of the token slots[i] holds (set once it is
	// written); seen[i] the tag of the last token that passed once and
	// hashes to slot i. 0 is no tag.
	held, seen []atomic.Uint64
}

func newVerifiedCache() *verifiedCache {
	return &verifiedCache{
		seed:  maphash.MakeSeed(),
		slots: make([]cacheSlot, cacheSlots),
		held:  make([]atomic.Uint64, cacheSlots),
		seen:  make([]atomic.Uint64, cacheSlots),
	}
}

// place is where a token goes in the table: its slot's index and its tag
// (its hash with the lowest bit set, so never 0). The zero place (no
// table) is for a token not to be remembered: too long, or a nil table
// (the tests' full check).
type place struct {
	vc  *verifiedCache
	i   uint64
	tag uint64
}

func (vc *verifiedCache) place(token []byte) place {
	if vc == nil || len(token) > cacheTokenMax {
		return place{}
	}
	h := maphash.Bytes(vc.seed, token)
	return place{vc: vc, i: h & (cacheSlots - 1), tag: h | 1}
}

// lookup answers for token as Verify would if its slot holds it: dst with
// the sub appended and nil, or dst and ErrExpired. hit is false otherwise.
func (p place) lookup(token []byte, nowUnix int64, dst []byte) (out []byte, hit bool, err error) {
	if p.vc == nil || p.vc.held[p.i].Load() != p.tag {
		return dst, false, nil
	}
	s := &p.vc.slots[p.i]
	var sub [order.MaxUserIDLen]byte
	s.mu.Lock()
	if int(s.n) != len(token) || !equalWords(s.tok[:len(token)], token) {
		s.mu.Unlock()
		return dst, false, nil
	}
	exp, nbf, hasNbf, n := s.exp, s.nbf, s.hasNbf, s.subLen
	copy(sub[:], s.sub[:n])
	s.mu.Unlock()
	if exp <= nowUnix || (hasNbf && nbf > nowUnix) {
		return dst, true, ErrExpired
	}
	return append(dst, sub[:n]...), true, nil
}

// passed records that token passed every check, saying cl: the first time
// its tag is noted, the second time (the tag is still there) it goes into
// its slot in place of the slot's old token.
func (p place) passed(token []byte, cl *claims) {
	if p.vc == nil || len(cl.sub) > order.MaxUserIDLen {
		return
	}
	if p.vc.seen[p.i].Load() != p.tag {
		p.vc.seen[p.i].Store(p.tag)
		return
	}
	s := &p.vc.slots[p.i]
	s.mu.Lock()
	s.n = uint16(len(token))
	copy(s.tok[:], token)
	s.subLen = uint8(copy(s.sub[:], cl.sub))
	s.exp, s.nbf, s.hasNbf = cl.exp, cl.nbf, cl.hasNbf
	p.vc.held[p.i].Store(p.tag)
	s.mu.Unlock()
}

// equalWords compares a and b (the same length) 8 bytes at a time and
// without an early exit, so the time taken says nothing about where they
// differ.
func equalWords(a, b []byte) bool {
	var diff uint64
	i := 0
	for ; i+8 <= len(a); i += 8 {
		diff |= binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:])
	}
	for ; i < len(a); i++ {
		diff |= uint64(a[i] ^ b[i])
	}
	return diff == 0
}
