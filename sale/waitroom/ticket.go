package waitroom

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"
)

// The refusals of Tickets.Check; the shopper hears BAD_TICKET for each.
var (
	ErrMalformed = errors.New("waitroom: malformed ticket")
	ErrForged    = errors.New("waitroom: ticket not valid for this shopper and sale")
	ErrExpired   = errors.New("waitroom: ticket expired")
)

// A ticket is base64url(version | id | place | expiry | tag): the tag is
// HMAC-SHA256 over the rest, the user id and the product id, truncated to
// 16 bytes. It proves the edge gave it to this shopper for this sale; the
// queue itself (the id's place, the admission) is in Redis, which also
// checks that the id is the shopper's.
const (
	IDLen      = 8
	TicketLen  = (ticketRaw*8 + 5) / 6
	CookiePref = "fg_wr_"
	// Header carries the ticket for clients without cookies.
	Header = "X-Queue-Ticket"

	ticketVersion = 1
	offPlace      = 1 + IDLen
	offTExp       = offPlace + 8
	offTTag       = offTExp + 8
	tTagLen       = 16
	ticketRaw     = offTTag + tTagLen
)

// ID is a ticket id: random, given at the join, ranked by the lottery.
type ID [IDLen]byte

// AppendHex appends id as 16 lower-case hex digits, its form in Redis and
// in the published lottery.
func (id ID) AppendHex(dst []byte) []byte {
	const digits = "0123456789abcdef"
	for _, b := range id {
		dst = append(dst, digits[b>>4], digits[b&0x0f])
	}
	return dst
}

// ParseID reads a hex id.
func ParseID(s string) (ID, bool) {
	var id ID
	if len(s) != 2*IDLen {
		return id, false
	}
	for i := 0; i < IDLen; i++ {
		h, ok1 := unhex(s[2*i])
		l, ok2 := unhex(s[2*i+1])
		if !ok1 || !ok2 {
			return id, false
		}
		id[i] = h<<4 | l
	}
	return id, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

var tb64 = base64.RawURLEncoding.Strict()

// Tickets signs and checks tickets; safe for concurrent use.
type Tickets struct {
	pool sync.Pool // of *ticketState
}

type ticketState struct {
	mac  hash.Hash
	raw  [ticketRaw]byte
	lens [4]byte
	sum  [sha256.Size]byte
}

// NewTickets returns a signer under secret (at least 32 bytes; every edge
// must share it).
func NewTickets(secret []byte) (*Tickets, error) {
	if len(secret) < 32 {
		return nil, fmt.Errorf("waitroom: ticket secret is %d bytes, need at least 32", len(secret))
	}
	s := append([]byte(nil), secret...)
	t := &Tickets{}
	t.pool.New = func() any { return &ticketState{mac: hmac.New(sha256.New, s)} }
	return t, nil
}

// DeriveSecret is the secret of one use ("ticket", "challenge") from the
// sale's token secret, so that the room needs no secret of its own and a
// value signed for one use is never valid for another.
func DeriveSecret(tokenSecret []byte, use string) []byte {
	m := hmac.New(sha256.New, tokenSecret)
	m.Write([]byte("flashgate waiting room " + use))
	return m.Sum(nil)
}

// Append appends the ticket for (user, product, id) at place (0: not known
// yet), valid until expiresMs.
func (t *Tickets) Append(dst, user, product []byte, id ID, place, expiresMs int64) []byte {
	st := t.pool.Get().(*ticketState)
	st.raw[0] = ticketVersion
	copy(st.raw[1:offPlace], id[:])
	binary.BigEndian.PutUint64(st.raw[offPlace:offTExp], uint64(place))
	binary.BigEndian.PutUint64(st.raw[offTExp:offTTag], uint64(expiresMs))
	st.tag(user, product)
	copy(st.raw[offTTag:], st.sum[:tTagLen])
	dst = tb64.AppendEncode(dst, st.raw[:])
	t.pool.Put(st)
	return dst
}

// Check verifies a ticket for (user, product) at nowMs and returns its id
// and place. It allocates nothing.
func (t *Tickets) Check(ticket, user, product []byte, nowMs int64) (id ID, place int64, err error) {
	if len(ticket) != TicketLen {
		return id, 0, ErrMalformed
	}
	for _, c := range ticket {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return id, 0, ErrMalformed
		}
	}
	st := t.pool.Get().(*ticketState)
	defer t.pool.Put(st)
	if n, err := tb64.Decode(st.raw[:], ticket); err != nil || n != ticketRaw || st.raw[0] != ticketVersion {
		return id, 0, ErrMalformed
	}
	st.tag(user, product)
	if !hmac.Equal(st.sum[:tTagLen], st.raw[offTTag:]) {
		return id, 0, ErrForged
	}
	if int64(binary.BigEndian.Uint64(st.raw[offTExp:offTTag])) <= nowMs {
		return id, 0, ErrExpired
	}
	copy(id[:], st.raw[1:offPlace])
	place = int64(binary.BigEndian.Uint64(st.raw[offPlace:offTExp]))
	if place < 0 {
		return ID{}, 0, ErrMalformed
	}
	return id, place, nil
}

func (st *ticketState) tag(user, product []byte) {
	st.mac.Reset()
	st.mac.Write(st.raw[:offTTag])
	binary.BigEndian.PutUint32(st.lens[:], uint32(len(user)))
	st.mac.Write(st.lens[:])
	st.mac.Write(user)
	binary.BigEndian.PutUint32(st.lens[:], uint32(len(product)))
	st.mac.Write(st.lens[:])
	st.mac.Write(product)
	st.mac.Sum(st.sum[:0])
}
