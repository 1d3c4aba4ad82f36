package session

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"sync"
	"time"

	"flashgate/orders/order"
)

// Errors returned by Verify. They are distinct so that logs can tell a client
// without a session from one presenting a forged or stale one.
var (
	ErrMissing   = errors.New("session: no token")
	ErrMalformed = errors.New("session: malformed token")
	ErrSignature = errors.New("session: bad signature")
	// ErrExpired also covers a token whose "nbf" lies in the future: both mean
	// "not valid at this instant", and a signer whose clock runs ahead shows up
	// the same way as a stale cookie.
	ErrExpired = errors.New("session: token expired or not yet valid")
)

const (
	// MinSecretLen is the shortest secret NewCodec accepts: RFC 7518 §3.2
	// requires a key at least as long as the hash output for HS256.
	MinSecretLen = 32

	// maxTokenLen keeps the decode buffers fixed-size. Browsers cap a cookie
	// at about 4 KB, so nothing legitimate is longer.
	maxTokenLen = 4096
	maxDecoded  = maxTokenLen * 3 / 4
	// sigB64Len is the unpadded base64url length of a SHA-256 MAC.
	sigB64Len = (sha256.Size*8 + 5) / 6
)

// b64 is strict so that a MAC segment has exactly one accepted spelling
// (non-zero trailing bits are refused). The decoder still skips CR and LF,
// which is why Verify checks the alphabet itself first.
var b64 = base64.RawURLEncoding.Strict()

// headerJSON is the only header Sign writes; headerB64 lets Verify skip
// parsing it in the common case.
const headerJSON = `{"alg":"HS256","typ":"JWT"}`

var headerB64 = []byte(base64.RawURLEncoding.EncodeToString([]byte(headerJSON)))

// Codec signs and verifies sessions. It is safe for concurrent use.
type Codec struct {
	secrets [][]byte
	ttl     time.Duration
	pool    sync.Pool // of *verifier
	// verified remembers the tokens that passed (cache.go).
	verified *verifiedCache
}

// verifier holds everything one Verify call writes to. It lives in a pool
// because the hash states are expensive to build and because any buffer
// handed to a hash.Hash method escapes to the heap, so none can be a local.
type verifier struct {
	macs   []hash.Hash // one per secret, same order as Codec.secrets
	sum    [sha256.Size]byte
	sig    [sigB64Len]byte // the MAC, encoded
	header [maxDecoded]byte
	claims [maxDecoded]byte
}

// NewCodec returns a Codec that signs with secrets[0] and accepts a token
// signed with any of secrets, valid for ttl after signing. Secrets are copied.
func NewCodec(secrets [][]byte, ttl time.Duration) (*Codec, error) {
	if len(secrets) == 0 {
		return nil, errors.New("session: at least one secret is required")
	}
	if ttl < time.Second {
		// exp has one-second resolution: a shorter ttl would sign tokens
		// that are already expired.
		return nil, fmt.Errorf("session: ttl %v is shorter than one second", ttl)
	}
	c := &Codec{ttl: ttl, verified: newVerifiedCache()}
	for i, s := range secrets {
		if len(s) < MinSecretLen {
			return nil, fmt.Errorf("session: secret %d is %d bytes, need at least %d", i, len(s), MinSecretLen)
		}
		c.secrets = append(c.secrets, append([]byte(nil), s...))
	}
	c.pool.New = func() any {
		v := &verifier{macs: make([]hash.Hash, len(c.secrets))}
		for i, s := range c.secrets {
			v.macs[i] = hmac.New(sha256.New, s)
		}
		return v
	}
	return c, nil
}

// TTL is the lifetime Sign gives a token, e.g. for the cookie's Max-Age.
func (c *Codec) TTL() time.Duration { return c.ttl }

// Sign returns a token for userID issued at now. It is not on the hot path
// (login only) and allocates freely.
func (c *Codec) Sign(userID string, now time.Time) (string, error) {
	if !order.ValidUserID(userID) {
		return "", fmt.Errorf("session: invalid user id %q", userID)
	}
	iat := now.Unix()
	exp := now.Add(c.ttl).Unix()
	claims := make([]byte, 0, 64+len(userID))
	claims = append(claims, `{"sub":"`...)
	claims = append(claims, userID...)
	claims = append(claims, `","iat":`...)
	claims = strconv.AppendInt(claims, iat, 10)
	claims = append(claims, `,"exp":`...)
	claims = strconv.AppendInt(claims, exp, 10)
	claims = append(claims, '}')

	tok := make([]byte, 0, len(headerB64)+1+b64.EncodedLen(len(claims))+1+sigB64Len)
	tok = append(tok, headerB64...)
	tok = append(tok, '.')
	tok = b64.AppendEncode(tok, claims)
	m := hmac.New(sha256.New, c.secrets[0])
	m.Write(tok)
	sum := m.Sum(nil)
	tok = append(tok, '.')
	tok = b64.AppendEncode(tok, sum)
	return string(tok), nil
}

// Verify checks token at nowUnix (seconds) and appends the user id it carries
// to dst. It allocates nothing. On error dst is returned unchanged.
//
// Checks run cheapest-first and the MAC before the claims, so unsigned input
// never reaches the claims parser; the header is checked before the MAC only
// because refusing an algorithm needs no key. A token this Codec verified
// twice before is answered from its table of them (cache.go) with the same
// answer, exp and nbf compared with nowUnix as always.
func (c *Codec) Verify(token []byte, nowUnix int64, dst []byte) ([]byte, error) {
	if len(token) == 0 {
		return dst, ErrMissing
	}
	if len(token) > maxTokenLen {
		return dst, ErrMalformed
	}
	at := c.verified.place(token)
	if out, hit, err := at.lookup(token, nowUnix, dst); hit {
		return out, err
	}
	d1, d2 := -1, -1
	for i, ch := range token {
		switch b64Class[ch] {
		case classB64:
			continue
		case classDot:
			switch {
			case d1 < 0:
				d1 = i
			case d2 < 0:
				d2 = i
			default:
				return dst, ErrMalformed // a JWE or garbage: more than three segments
			}
		default:
			return dst, ErrMalformed
		}
	}
	if d2 < 0 || d1 == 0 || d2 == d1+1 || len(token)-d2-1 != sigB64Len {
		return dst, ErrMalformed
	}
	// The MAC segment's last character carries 4 bits of the MAC and 2 that
	// must be zero: the strict decoder refuses anything else, and so does
	// this, before any key is used. The segment is then the one canonical
	// spelling of some 32 bytes, so comparing it with the encoding of the
	// MAC is comparing the MACs.
	sig := token[d2+1:]
	if b64Low2[sig[sigB64Len-1]] {
		return dst, ErrMalformed
	}

	v := c.pool.Get().(*verifier)
	defer c.pool.Put(v)

	if h := token[:d1]; !bytesEqual(h, headerB64) {
		n, err := b64.Decode(v.header[:], h)
		if err != nil || !headerOK(v.header[:n]) {
			return dst, ErrMalformed
		}
	}
	signed := false
	for _, m := range v.macs {
		m.Reset()
		m.Write(token[:d2])
		b64.Encode(v.sig[:], m.Sum(v.sum[:0]))
		if hmac.Equal(v.sig[:], sig) {
			signed = true
			break
		}
	}
	if !signed {
		return dst, ErrSignature
	}

	n, err := b64.Decode(v.claims[:], token[d1+1:d2])
	if err != nil {
		return dst, ErrMalformed
	}
	cl, ok := parseClaims(v.claims[:n])
	if !ok || !order.ValidUserID(cl.sub) {
		return dst, ErrMalformed
	}
	if cl.exp <= nowUnix || (cl.hasNbf && cl.nbf > nowUnix) {
		return dst, ErrExpired
	}
	at.passed(token, &cl)
	return append(dst, cl.sub...), nil
}

// The classes of a token's bytes, looked up instead of compared: Verify
// reads every byte of every token.
const (
	classOther = iota
	classB64
	classDot
)

var (
	b64Class [256]uint8
	// b64Low2 marks the alphabet's characters whose value has either of
	// the two lowest bits set.
	b64Low2 [256]bool
)

func init() {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for v := range len(alphabet) {
		b64Class[alphabet[v]] = classB64
		b64Low2[alphabet[v]] = v&3 != 0
	}
	b64Class['.'] = classDot
}

// bytesEqual is bytes.Equal; the header is public, so timing does not matter.
func bytesEqual(a, b []byte) bool { return string(a) == string(b) }
