package ptoken

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

// Envelope is the signed form every value the edge hands a shopper and
// later trusts shares (purchase tokens, waiting-room tickets):
// base64url(version | payload | expiry | tag), the tag HMAC-SHA256 over the
// rest, the user id and the product id, truncated to 16 bytes. It proves
// the edge issued the payload to this user for this product until expiry.
// Safe for concurrent use; Open allocates nothing.
type Envelope struct {
	version    byte
	payloadLen int
	rawLen     int
	tokenLen   int
	pool       sync.Pool // of *state
}

// MaxPayload bounds an envelope's payload.
const MaxPayload = 32

// The refusals of Envelope.Open. Their texts say "token"; packages with
// their own words wrap or map them.
var (
	ErrMalformed = errors.New("ptoken: malformed token")
	// ErrForged covers a token minted for another user or product as well as
	// one made up: the MAC cannot tell them apart, and need not.
	ErrForged  = errors.New("ptoken: token not valid for this user and product")
	ErrExpired = errors.New("ptoken: token expired")
)

// b64 is strict so that a token has exactly one accepted spelling; CR and LF,
// which the decoder skips even then, are refused by the alphabet check.
var b64 = base64.RawURLEncoding.Strict()

const tagLen = 16

// state is what one Seal or Open writes to. It is pooled because the HMAC is
// costly to build and because any buffer passed to a hash.Hash method (or to
// crypto/rand) escapes to the heap, so none of these can be locals.
type state struct {
	mac  hash.Hash
	raw  [1 + MaxPayload + 8 + tagLen]byte
	lens [4]byte
	sum  [sha256.Size]byte
}

// NewEnvelope returns an Envelope of payloadLen bytes under secret (copied,
// at least MinSecretLen bytes). Different uses of one secret must differ in
// version or derive their own secret.
func NewEnvelope(secret []byte, version byte, payloadLen int) (*Envelope, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("ptoken: secret is %d bytes, need at least %d", len(secret), MinSecretLen)
	}
	if payloadLen < 1 || payloadLen > MaxPayload {
		return nil, fmt.Errorf("ptoken: payload of %d bytes, want 1..%d", payloadLen, MaxPayload)
	}
	s := append([]byte(nil), secret...)
	e := &Envelope{version: version, payloadLen: payloadLen, rawLen: 1 + payloadLen + 8 + tagLen}
	e.tokenLen = (e.rawLen*8 + 5) / 6
	e.pool.New = func() any { return &state{mac: hmac.New(sha256.New, s)} }
	return e, nil
}

// Len is the length of every token the envelope writes.
func (e *Envelope) Len() int { return e.tokenLen }

// Seal appends the token of payload (payloadLen bytes) for user and
// product, valid until expiresMs (Unix ms, exclusive), to dst.
func (e *Envelope) Seal(dst, payload, user, product []byte, expiresMs int64) []byte {
	st := e.pool.Get().(*state)
	copy(st.raw[1:1+e.payloadLen], payload)
	dst = e.seal(st, dst, user, product, expiresMs)
	e.pool.Put(st)
	return dst
}

// seal finishes st, whose payload is written, into dst.
func (e *Envelope) seal(st *state, dst, user, product []byte, expiresMs int64) []byte {
	offExp := 1 + e.payloadLen
	st.raw[0] = e.version
	binary.BigEndian.PutUint64(st.raw[offExp:offExp+8], uint64(expiresMs))
	e.tag(st, user, product)
	copy(st.raw[offExp+8:e.rawLen], st.sum[:tagLen])
	return b64.AppendEncode(dst, st.raw[:e.rawLen])
}

// Open verifies token for user and product at nowMs, copies its payload
// into payload and returns its expiry. The MAC is checked before the expiry
// so that an expiry read from a forged token never shows up as ErrExpired.
func (e *Envelope) Open(token, user, product []byte, nowMs int64, payload []byte) (expiresMs int64, err error) {
	if len(token) != e.tokenLen {
		return 0, ErrMalformed
	}
	for _, c := range token {
		if !isB64URL(c) {
			return 0, ErrMalformed
		}
	}
	st := e.pool.Get().(*state)
	defer e.pool.Put(st)
	if n, err := b64.Decode(st.raw[:], token); err != nil || n != e.rawLen || st.raw[0] != e.version {
		return 0, ErrMalformed
	}
	e.tag(st, user, product)
	offExp := 1 + e.payloadLen
	if !hmac.Equal(st.sum[:tagLen], st.raw[offExp+8:e.rawLen]) {
		return 0, ErrForged
	}
	exp := int64(binary.BigEndian.Uint64(st.raw[offExp : offExp+8]))
	if nowMs >= exp {
		return 0, ErrExpired
	}
	copy(payload, st.raw[1:offExp])
	return exp, nil
}

// tag computes the MAC of the token's body bound to user and product into st.sum.
func (e *Envelope) tag(st *state, user, product []byte) {
	st.mac.Reset()
	st.mac.Write(st.raw[:1+e.payloadLen+8])
	binary.BigEndian.PutUint32(st.lens[:], uint32(len(user)))
	st.mac.Write(st.lens[:])
	st.mac.Write(user)
	binary.BigEndian.PutUint32(st.lens[:], uint32(len(product)))
	st.mac.Write(st.lens[:])
	st.mac.Write(product)
	st.mac.Sum(st.sum[:0])
}

func isB64URL(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}
