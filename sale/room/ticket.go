package room

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flashgate/sale/ptoken"
	"fmt"
)

// The refusals of Tickets.Check; the shopper hears BAD_TICKET for each.
var (
	ErrMalformed = errors.New("waitroom: malformed ticket")
	ErrForged    = errors.New("waitroom: ticket not valid for this shopper and sale")
	ErrExpired   = errors.New("waitroom: ticket expired")
)

// A ticket is a ptoken.Envelope whose payload is id | place: it proves the
// edge gave it to this shopper for this sale until its expiry; the queue
// itself (the id's place, the admission) is in Redis, which also checks
// that the id is the shopper's.
const (
	IDLen      = 8
	TicketLen  = (ticketRaw*8 + 5) / 6
	CookiePref = "fg_wr_"
	// Header carries the ticket for clients without cookies.
	Header = "X-Queue-Ticket"

	ticketVersion = 1
	payloadLen    = IDLen + 8
	ticketRaw     = 1 + payloadLen + 8 + 16
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

// Tickets signs and checks tickets; safe for concurrent use.
type Tickets struct {
	env *ptoken.Envelope
}

// NewTickets returns a signer under secret (at least 32 bytes; every edge
// must share it).
func NewTickets(secret []byte) (*Tickets, error) {
	env, err := ptoken.NewEnvelope(secret, ticketVersion, payloadLen)
	if err != nil {
		return nil, fmt.Errorf("waitroom: ticket secret: %w", err)
	}
	return &Tickets{env: env}, nil
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
	var payload [payloadLen]byte
	copy(payload[:IDLen], id[:])
	binary.BigEndian.PutUint64(payload[IDLen:], uint64(place))
	return t.env.Seal(dst, payload[:], user, product, expiresMs)
}

// Check verifies a ticket for (user, product) at nowMs and returns its id
// and place. It allocates nothing.
func (t *Tickets) Check(ticket, user, product []byte, nowMs int64) (id ID, place int64, err error) {
	id, place, _, err = t.CheckExpiry(ticket, user, product, nowMs)
	return id, place, err
}

// CheckExpiry is Check, also answering the ticket's expiry (which, less
// the lifetime it was given with, is when it was issued).
func (t *Tickets) CheckExpiry(ticket, user, product []byte, nowMs int64) (id ID, place, expiresMs int64, err error) {
	var payload [payloadLen]byte
	exp, err := t.env.Open(ticket, user, product, nowMs, payload[:])
	switch {
	case errors.Is(err, ptoken.ErrForged):
		return id, 0, 0, ErrForged
	case errors.Is(err, ptoken.ErrExpired):
		return id, 0, 0, ErrExpired
	case err != nil:
		return id, 0, 0, ErrMalformed
	}
	copy(id[:], payload[:IDLen])
	place = int64(binary.BigEndian.Uint64(payload[IDLen:]))
	if place < 0 {
		return ID{}, 0, 0, ErrMalformed
	}
	return id, place, exp, nil
}
