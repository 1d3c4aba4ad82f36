package room

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"
)

// KeyLen is the lottery key's length in bytes.
const KeyLen = 32

// NewKey draws a lottery key and its commitment: the key (hex) stays in
// Redis until the opening; the commit, SHA-256 of the key's bytes (hex), is
// public from the pre-queue's opening on, so the key cannot be swapped
// once shoppers have joined.
func NewKey() (key, commit string) {
	var k [KeyLen]byte
	rand.Read(k[:])
	sum := sha256.Sum256(k[:])
	return hex.EncodeToString(k[:]), hex.EncodeToString(sum[:])
}

// Commit is the commitment of a hex key ("" if it is not hex).
func Commit(key string) string {
	k, err := hex.DecodeString(key)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(k)
	return hex.EncodeToString(sum[:])
}

// Rank orders the pre-queue's ticket ids by HMAC-SHA256(key bytes, ticket
// id), ascending, ties (none in practice) by the id: place 1 is the first.
// Anyone with the revealed key and the list of ids recomputes it.
func Rank(key string, ids []string) ([]string, error) {
	k, err := hex.DecodeString(key)
	if err != nil {
		return nil, err
	}
	type ranked struct {
		mac [sha256.Size]byte
		id  string
	}
	rs := make([]ranked, len(ids))
	m := hmac.New(sha256.New, k)
	for i, id := range ids {
		m.Reset()
		m.Write([]byte(id))
		m.Sum(rs[i].mac[:0])
		rs[i].id = id
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if c := strings.Compare(string(a.mac[:]), string(b.mac[:])); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	out := make([]string, len(rs))
	for i := range rs {
		out[i] = rs[i].id
	}
	return out, nil
}

// Score is ticket id's lottery score under key: HMAC-SHA256(key, id) read
// as a number in [0, 1). Ordering by it is Rank's order; a route room's
// random method places its visitors by it as they come.
func Score(key, id []byte) float64 {
	m := hmac.New(sha256.New, key)
	m.Write(id)
	var sum [sha256.Size]byte
	m.Sum(sum[:0])
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}
