package waitroom

// A stand-in for the proof-of-work challenge (its own change writes the
// real one, with the same API): enough for the room's handlers and tests.

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math/bits"
	"strconv"
)

var errChallenge = errors.New("waitroom: bad challenge")

// Challenger issues and verifies proof-of-work challenges.
type Challenger struct{ key []byte }

// NewChallenger returns a challenger under secret.
func NewChallenger(secret []byte) *Challenger {
	return &Challenger{key: DeriveSecret(secret, "challenge stand-in")}
}

var cb64 = base64.RawURLEncoding

// Issue: version | difficulty | id (12) | expiry (8) | tag (16).
func (c *Challenger) Issue(user, product []byte, difficulty int, nowMs int64) string {
	var raw [1 + 1 + 12 + 8 + 16]byte
	raw[0], raw[1] = 1, byte(difficulty)
	rand.Read(raw[2:14])
	binary.BigEndian.PutUint64(raw[14:22], uint64(nowMs+60000))
	copy(raw[22:], c.tag(raw[:22], user, product))
	return cb64.EncodeToString(raw[:])
}

func (c *Challenger) tag(b, user, product []byte) []byte {
	m := hmac.New(sha256.New, c.key)
	m.Write(b)
	m.Write([]byte{byte(len(user))})
	m.Write(user)
	m.Write(product)
	return m.Sum(nil)[:16]
}

// Verify checks a solved challenge.
func (c *Challenger) Verify(challenge, nonce, user, product []byte, nowMs int64) error {
	raw, err := cb64.DecodeString(string(challenge))
	if err != nil || len(raw) != 38 || raw[0] != 1 {
		return errChallenge
	}
	if !hmac.Equal(raw[22:], c.tag(raw[:22], user, product)) || int64(binary.BigEndian.Uint64(raw[14:22])) <= nowMs {
		return errChallenge
	}
	if _, err := strconv.ParseUint(string(nonce), 10, 64); err != nil {
		return errChallenge
	}
	sum := sha256.Sum256(append(append(append([]byte(nil), challenge...), ':'), nonce...))
	if bits.LeadingZeros32(binary.BigEndian.Uint32(sum[:])) < int(raw[1]) {
		return errChallenge
	}
	return nil
}

// ChallengeID is the challenge's id (its single use's key).
func ChallengeID(challenge []byte) []byte {
	if len(challenge) < 20 {
		return nil
	}
	return challenge[4:20]
}

// ChallengeExpiresMs is when the challenge expires.
func ChallengeExpiresMs(challenge []byte) (int64, bool) {
	raw, err := cb64.DecodeString(string(challenge))
	if err != nil || len(raw) != 38 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(raw[14:22])), true
}
