package room

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	powSecret  = []byte("0123456789abcdef0123456789abcdef-waitroom")
	powUser    = []byte("alice@example.com")
	powProduct = []byte("p3")
	// powNow is the fixed clock of every test (Unix ms).
	powNow = int64(1_780_000_000_000)
)

// derivedKey is the documented key derivation, written out independently.
func derivedKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("flashgate waitroom challenge v1"))
	return m.Sum(nil)
}

// buildChallenge writes a challenge from the documented layout with a chosen
// id, independently of Issue, so that fuzz seeds are the same in every fuzz
// worker and a change of the layout breaks a test.
func buildChallenge(key []byte, id byte, difficulty int, expiresMs int64, product, user []byte) []byte {
	raw := []byte{1, byte(difficulty), byte(len(product))}
	raw = append(raw, bytes.Repeat([]byte{id}, 12)...)
	raw = binary.BigEndian.AppendUint64(raw, uint64(expiresMs))
	raw = append(raw, product...)
	raw = append(raw, byte(len(user)))
	raw = append(raw, user...)
	m := hmac.New(sha256.New, key)
	m.Write(raw)
	raw = append(raw, m.Sum(nil)[:16]...)
	return []byte(base64.RawURLEncoding.EncodeToString(raw))
}

// leadingZeroBits counts the zero bits at the start of SHA-256(challenge ":" nonce).
func leadingZeroBits(challenge, nonce []byte) int {
	sum := sha256.Sum256([]byte(string(challenge) + ":" + string(nonce)))
	n := 0
	for _, b := range sum {
		if b != 0 {
			return n + bits.LeadingZeros8(b)
		}
		n += 8
	}
	return n
}

// solve finds the smallest nonce with at least d leading zero bits, as the
// worker does.
func solve(challenge []byte, d int) []byte {
	for n := uint64(0); ; n++ {
		nonce := strconv.AppendUint(nil, n, 10)
		if leadingZeroBits(challenge, nonce) >= d {
			return nonce
		}
	}
}

// unsolved finds a nonce with fewer than d leading zero bits.
func unsolved(challenge []byte, d int) []byte {
	for n := uint64(0); ; n++ {
		nonce := strconv.AppendUint(nil, n, 10)
		if leadingZeroBits(challenge, nonce) < d {
			return nonce
		}
	}
}

func TestChallengeRoundTrip(t *testing.T) {
	c := NewChallenger(powSecret)
	for _, d := range []int{0, 1, 8, 12} {
		t.Run(fmt.Sprint(d), func(t *testing.T) {
			ch := []byte(c.Issue(powUser, powProduct, d, powNow))
			if len(ch) < MinChallengeLen || len(ch) > MaxChallengeLen {
				t.Fatalf("length %d outside %d..%d", len(ch), MinChallengeLen, MaxChallengeLen)
			}
			if strings.Trim(string(ch), "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
				t.Fatalf("not base64url: %q", ch)
			}
			nonce := solve(ch, d)
			if err := c.Verify(ch, nonce, powUser, powProduct, powNow); err != nil {
				t.Fatalf("Verify(solved at %d bits) = %v", d, err)
			}
			if d > 0 {
				if err := c.Verify(ch, unsolved(ch, d), powUser, powProduct, powNow); !errors.Is(err, ErrChallengeInsufficientWork) {
					t.Fatalf("Verify(unsolved) = %v", err)
				}
			}
		})
	}
}

// The work accepted is exactly "SHA-256(challenge:nonce) has >= d leading
// zero bits", counted by an independent implementation, on both sides of d.
func TestChallengeWorkBoundary(t *testing.T) {
	c := NewChallenger(powSecret)
	const d = 5
	ch := []byte(c.Issue(powUser, powProduct, d, powNow))
	accepted, refused := 0, 0
	for n := range 4000 {
		nonce := []byte(strconv.Itoa(n))
		want := leadingZeroBits(ch, nonce) >= d
		err := c.Verify(ch, nonce, powUser, powProduct, powNow)
		switch {
		case want && err != nil:
			t.Fatalf("nonce %s has %d zero bits, refused: %v", nonce, leadingZeroBits(ch, nonce), err)
		case !want && !errors.Is(err, ErrChallengeInsufficientWork):
			t.Fatalf("nonce %s has %d zero bits, Verify = %v", nonce, leadingZeroBits(ch, nonce), err)
		case want:
			accepted++
		default:
			refused++
		}
	}
	// 4000 tries at 1/32: ~125 accepted; both sides must have been seen.
	if accepted < 50 || refused < 3000 {
		t.Fatalf("accepted %d, refused %d of 4000", accepted, refused)
	}
}

// Issue writes the documented layout: a challenge built from it
// independently verifies, and Issue's own decodes to the fields asked for.
func TestChallengeLayout(t *testing.T) {
	c := NewChallenger(powSecret)
	key := derivedKey(powSecret)
	built := buildChallenge(key, 7, 3, powNow+1000, powProduct, powUser)
	if err := c.Verify(built, solve(built, 3), powUser, powProduct, powNow); err != nil {
		t.Fatalf("challenge built from the layout refused: %v", err)
	}
	ch := c.Issue(powUser, powProduct, 9, powNow)
	raw, err := base64.RawURLEncoding.DecodeString(ch)
	if err != nil {
		t.Fatal(err)
	}
	pl := int(raw[2])
	ul := int(raw[23+pl])
	if raw[0] != 1 || raw[1] != 9 || string(raw[23:23+pl]) != string(powProduct) || string(raw[24+pl:24+pl+ul]) != string(powUser) {
		t.Fatalf("fields: %x", raw)
	}
	if exp := int64(binary.BigEndian.Uint64(raw[15:23])); exp != powNow+ChallengeTTL.Milliseconds() {
		t.Fatalf("expiry %d, want now + %v", exp, ChallengeTTL)
	}
	m := hmac.New(sha256.New, key)
	m.Write(raw[:len(raw)-16])
	if !hmac.Equal(m.Sum(nil)[:16], raw[len(raw)-16:]) {
		t.Fatal("tag is not HMAC-SHA256(derived key, body)[:16]")
	}
	// The key is derived: the same layout signed with the bare secret (a
	// purchase token's key) is not a challenge.
	bare := buildChallenge(powSecret, 7, 0, powNow+1000, powProduct, powUser)
	if err := c.Verify(bare, []byte("0"), powUser, powProduct, powNow); !errors.Is(err, ErrChallengeForged) {
		t.Fatalf("challenge signed with the bare secret: %v", err)
	}
}

func TestChallengeLengths(t *testing.T) {
	c := NewChallenger(powSecret)
	long := func(n int) []byte { return bytes.Repeat([]byte("a"), n) }
	short := c.Issue([]byte("u"), []byte("p"), 0, powNow)
	longest := c.Issue(long(64), long(64), 0, powNow)
	if len(short) != MinChallengeLen || len(longest) != MaxChallengeLen {
		t.Fatalf("lengths %d and %d, want %d and %d", len(short), len(longest), MinChallengeLen, MaxChallengeLen)
	}
	for _, ch := range []string{short, longest} {
		if err := c.Verify([]byte(ch), []byte("0"), []byte(userOf(ch)), []byte(productOf(ch)), powNow); err != nil {
			t.Fatalf("Verify(%d chars) = %v", len(ch), err)
		}
	}
	if err := c.Verify([]byte(longest+"A"), []byte("0"), long(64), long(64), powNow); !errors.Is(err, ErrChallengeMalformed) {
		t.Fatalf("one character over the maximum: %v", err)
	}
}

// nonCanonical sets a pad bit of the last character, which a strict
// decoder refuses: every challenge has one spelling.
func nonCanonical(ch []byte) []byte {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	b := bytes.Clone(ch)
	b[len(b)-1] = alphabet[strings.IndexByte(alphabet, b[len(b)-1])|1]
	return b
}

// userOf and productOf read a challenge's fields back (tests only).
func userOf(ch string) string {
	raw, _ := base64.RawURLEncoding.DecodeString(ch)
	pl := int(raw[2])
	return string(raw[24+pl : len(raw)-16])
}

func productOf(ch string) string {
	raw, _ := base64.RawURLEncoding.DecodeString(ch)
	return string(raw[23 : 23+int(raw[2])])
}

func TestChallengeRefusals(t *testing.T) {
	c := NewChallenger(powSecret)
	const d = 6
	ch := []byte(c.Issue(powUser, powProduct, d, powNow))
	nonce := solve(ch, d)
	exp := powNow + ChallengeTTL.Milliseconds()
	key := derivedKey(powSecret)
	flip := func(i int) []byte {
		b := bytes.Clone(ch)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return b
	}
	// A challenge whose body lies about its lengths, correctly signed: it must
	// be refused as malformed, not read out of bounds.
	badLen := func(mut func(raw []byte)) []byte {
		raw, _ := base64.RawURLEncoding.DecodeString(string(buildChallenge(key, 1, 0, exp, powProduct, powUser)))
		mut(raw)
		m := hmac.New(sha256.New, key)
		m.Write(raw[:len(raw)-16])
		copy(raw[len(raw)-16:], m.Sum(nil))
		return []byte(base64.RawURLEncoding.EncodeToString(raw))
	}
	other := NewChallenger([]byte("another secret of thirty-two bytes or more"))
	cases := []struct {
		name                   string
		challenge, nonce, user []byte
		product                []byte
		now                    int64
		want                   error
	}{
		{"solved", ch, nonce, powUser, powProduct, powNow, nil},
		{"last millisecond", ch, nonce, powUser, powProduct, exp - 1, nil},
		{"expired", ch, nonce, powUser, powProduct, exp, ErrChallengeExpired},
		{"another user", ch, nonce, []byte("bob"), powProduct, powNow, ErrChallengeWrongUser},
		{"user prefix", ch, nonce, powUser[:5], powProduct, powNow, ErrChallengeWrongUser},
		{"another sale", ch, nonce, powUser, []byte("p1"), powNow, ErrChallengeWrongProduct},
		{"insufficient work", ch, unsolved(ch, d), powUser, powProduct, powNow, ErrChallengeInsufficientWork},
		{"other secret", []byte(other.Issue(powUser, powProduct, d, powNow)), nonce, powUser, powProduct, powNow, ErrChallengeForged},
		{"tag changed", flip(len(ch) - 2), nonce, powUser, powProduct, powNow, ErrChallengeForged},
		{"difficulty lowered", flip(2), nonce, powUser, powProduct, powNow, ErrChallengeForged},
		{"expiry changed", flip(21), nonce, powUser, powProduct, powNow, ErrChallengeForged},
		{"empty", nil, nonce, powUser, powProduct, powNow, ErrChallengeMalformed},
		{"too short", ch[:MinChallengeLen-1], nonce, powUser, powProduct, powNow, ErrChallengeMalformed},
		{"truncated", ch[:len(ch)-3], nonce, powUser, powProduct, powNow, ErrChallengeMalformed},
		{"padding", append(bytes.Clone(ch), '='), nonce, powUser, powProduct, powNow, ErrChallengeMalformed},
		{"standard alphabet", append([]byte("+/"), ch[2:]...), nonce, powUser, powProduct, powNow, ErrChallengeMalformed},
		{"line break", append(append(bytes.Clone(ch[:10]), '\n'), ch[10:]...), nonce, powUser, powProduct, powNow, ErrChallengeMalformed},
		{"non-canonical last char", nonCanonical(ch), nonce, powUser, powProduct, powNow, ErrChallengeMalformed},
		{"version 2", badLen(func(r []byte) { r[0] = 2 }), []byte("0"), powUser, powProduct, powNow, ErrChallengeMalformed},
		{"product length 0", badLen(func(r []byte) { r[2] = 0 }), []byte("0"), powUser, powProduct, powNow, ErrChallengeMalformed},
		{"product length past the end", badLen(func(r []byte) { r[2] = 64 }), []byte("0"), powUser, powProduct, powNow, ErrChallengeMalformed},
		{"user length past the end", badLen(func(r []byte) { r[23+len(powProduct)] = 200 }), []byte("0"), powUser, powProduct, powNow, ErrChallengeMalformed},
		{"difficulty 33, signed", badLen(func(r []byte) { r[1] = 33 }), []byte("0"), powUser, powProduct, powNow, ErrChallengeMalformed},
		{"nonce empty", ch, nil, powUser, powProduct, powNow, ErrChallengeBadNonce},
		{"nonce not decimal", ch, []byte("12a"), powUser, powProduct, powNow, ErrChallengeBadNonce},
		{"nonce negative", ch, []byte("-1"), powUser, powProduct, powNow, ErrChallengeBadNonce},
		{"nonce with space", ch, append([]byte(" "), nonce...), powUser, powProduct, powNow, ErrChallengeBadNonce},
		{"nonce 21 digits", ch, bytes.Repeat([]byte("1"), 21), powUser, powProduct, powNow, ErrChallengeBadNonce},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.Verify(tc.challenge, tc.nonce, tc.user, tc.product, tc.now); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
	// 20 digits is the documented maximum: refused for the work, not the form.
	if err := c.Verify(ch, bytes.Repeat([]byte("9"), 20), powUser, powProduct, powNow); err != nil && !errors.Is(err, ErrChallengeInsufficientWork) {
		t.Fatalf("20-digit nonce: %v", err)
	}
}

// A forged challenge never reports what it claims: its expiry, user or
// product are not believed before the tag holds.
func TestChallengeForgedBeforeClaims(t *testing.T) {
	c := NewChallenger(powSecret)
	forged := buildChallenge([]byte("not the key"), 1, 0, powNow-1, powProduct, powUser)
	for _, who := range [][]byte{powUser, []byte("bob")} {
		if err := c.Verify(forged, []byte("0"), who, []byte("p9"), powNow); !errors.Is(err, ErrChallengeForged) {
			t.Fatalf("forged, expired, other user and product: %v", err)
		}
	}
}

func TestChallengeDifficultyRange(t *testing.T) {
	for _, d := range []int{0, 1, 20, MaxChallengeDifficulty} {
		if err := CheckChallengeDifficulty(d); err != nil {
			t.Fatalf("%d refused: %v", d, err)
		}
	}
	for _, d := range []int{-1, 33, 256} {
		err := CheckChallengeDifficulty(d)
		if err == nil || !strings.Contains(err.Error(), "difficulty") {
			t.Fatalf("%d: %v", d, err)
		}
		if ch := NewChallenger(powSecret).Issue(powUser, powProduct, d, powNow); ch != "" {
			t.Fatalf("Issue at difficulty %d = %q", d, ch)
		}
	}
	// 32 is issued and checked on its first word only: a nonce that does not
	// give 32 zero bits is refused.
	c := NewChallenger(powSecret)
	ch := []byte(c.Issue(powUser, powProduct, 32, powNow))
	if err := c.Verify(ch, unsolved(ch, 32), powUser, powProduct, powNow); !errors.Is(err, ErrChallengeInsufficientWork) {
		t.Fatalf("difficulty 32: %v", err)
	}
}

// Invalid input gets "", never a panic (Issue runs in a request handler),
// and "" is no challenge.
func TestChallengeIssueRefusesBadInput(t *testing.T) {
	c := NewChallenger(powSecret)
	for name, ch := range map[string]string{
		"empty user":    c.Issue(nil, powProduct, 1, powNow),
		"user too long": c.Issue(bytes.Repeat([]byte("u"), 65), powProduct, 1, powNow),
		"user with ':'": c.Issue([]byte("a:b"), powProduct, 1, powNow),
		"bad product":   c.Issue(powUser, []byte("_static"), 1, powNow),
	} {
		if ch != "" {
			t.Errorf("%s: Issue = %q", name, ch)
		}
	}
	if err := c.Verify(nil, []byte("0"), powUser, powProduct, powNow); !errors.Is(err, ErrChallengeMalformed) {
		t.Fatalf(`Verify("") = %v`, err)
	}
	// A short secret is the config's to refuse; the challenger still works.
	short := NewChallenger([]byte("k"))
	ch := []byte(short.Issue(powUser, powProduct, 0, powNow))
	if short.Verify(ch, []byte("0"), powUser, powProduct, powNow) != nil || c.Verify(ch, []byte("0"), powUser, powProduct, powNow) == nil {
		t.Fatal("a challenger under a short secret")
	}
}

func TestChallengeSecretCopied(t *testing.T) {
	s := bytes.Clone(powSecret)
	c := NewChallenger(s)
	ch := []byte(c.Issue(powUser, powProduct, 0, powNow))
	s[0] ^= 1
	if err := c.Verify(ch, []byte("0"), powUser, powProduct, powNow); err != nil {
		t.Fatalf("caller changing its secret changed the challenger: %v", err)
	}
}

func TestChallengeIDAndExpiry(t *testing.T) {
	c := NewChallenger(powSecret)
	short := c.WithTTL(10 * time.Second)
	if short.TTL() != 10*time.Second || c.TTL() != ChallengeTTL || c.WithTTL(0).TTL() != ChallengeTTL {
		t.Fatalf("TTLs %v %v", short.TTL(), c.TTL())
	}
	seen := map[string]bool{}
	for i := range 100 {
		cc := c
		if i%2 == 1 {
			cc = short
		}
		ch := []byte(cc.Issue(powUser, powProduct, 0, powNow))
		id := ChallengeID(ch)
		raw, _ := base64.RawURLEncoding.DecodeString(string(ch))
		if want := base64.RawURLEncoding.EncodeToString(raw[3:15]); string(id) != want || len(id) != ChallengeIDLen {
			t.Fatalf("ChallengeID = %q, want the id bytes %q", id, want)
		}
		if seen[string(id)] {
			t.Fatalf("id %q issued twice", id)
		}
		seen[string(id)] = true
		exp, ok := ChallengeExpiresMs(ch)
		if want := powNow + cc.TTL().Milliseconds(); !ok || exp != want {
			t.Fatalf("ChallengeExpiresMs = %d %v, want %d", exp, ok, want)
		}
		// The TTL is a property of the issuer only: both verify both.
		for _, v := range []*Challenger{c, short} {
			if err := v.Verify(ch, []byte("0"), powUser, powProduct, exp-1); err != nil {
				t.Fatalf("Verify before expiry: %v", err)
			}
			if err := v.Verify(ch, []byte("0"), powUser, powProduct, exp); !errors.Is(err, ErrChallengeExpired) {
				t.Fatalf("Verify at expiry: %v", err)
			}
		}
	}
	if ChallengeID([]byte("short")) != nil {
		t.Fatal("ChallengeID of a short string")
	}
	if _, ok := ChallengeExpiresMs([]byte("short")); ok {
		t.Fatal("ChallengeExpiresMs of a short string")
	}
	if _, ok := ChallengeExpiresMs(bytes.Repeat([]byte("!"), MinChallengeLen)); ok {
		t.Fatal("ChallengeExpiresMs of a non-base64url string")
	}
}

func TestChallengeVerifyAllocs(t *testing.T) {
	if challengeRaceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	c := NewChallenger(powSecret)
	ch := []byte(c.Issue(powUser, powProduct, 8, powNow))
	nonce := solve(ch, 8)
	bad := unsolved(ch, 8)
	other := []byte("bob")
	forged := bytes.Clone(ch)
	forged[len(forged)-2] = map[bool]byte{true: 'B', false: 'A'}[forged[len(forged)-2] == 'A']
	cases := []struct {
		name string
		f    func() error
		want error
	}{
		{"accepted", func() error { return c.Verify(ch, nonce, powUser, powProduct, powNow) }, nil},
		{"insufficient", func() error { return c.Verify(ch, bad, powUser, powProduct, powNow) }, ErrChallengeInsufficientWork},
		{"wrong user", func() error { return c.Verify(ch, nonce, other, powProduct, powNow) }, ErrChallengeWrongUser},
		{"expired", func() error { return c.Verify(ch, nonce, powUser, powProduct, powNow+1e9) }, ErrChallengeExpired},
		{"forged", func() error { return c.Verify(forged, nonce, powUser, powProduct, powNow) }, ErrChallengeForged},
		{"malformed", func() error { return c.Verify(ch[:len(ch)-3], nonce, powUser, powProduct, powNow) }, ErrChallengeMalformed},
		{"id", func() error { ChallengeID(ch); return nil }, nil},
		{"expiry", func() error { ChallengeExpiresMs(ch); return nil }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if a := testing.AllocsPerRun(500, func() { err = tc.f() }); a != 0 {
				t.Fatalf("%v allocs per run", a)
			}
			if err != tc.want {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}
}

// FuzzChallengeVerify: whatever the input, Verify does not panic, and what
// it accepts is a challenge signed with the derived key for this user and
// product, unexpired, whose nonce has the work, all checked independently.
func FuzzChallengeVerify(f *testing.F) {
	c := NewChallenger(powSecret)
	key := derivedKey(powSecret)
	for i, d := range []int{0, 2, 4} {
		ch := buildChallenge(key, byte(i), d, powNow+1000, powProduct, powUser)
		f.Add(ch, solve(ch, d), powNow)
	}
	f.Add(buildChallenge([]byte("some other key"), 9, 0, powNow+1000, powProduct, powUser), []byte("0"), powNow)
	f.Add(bytes.Repeat([]byte("A"), MinChallengeLen), []byte("1"), int64(0))
	f.Add([]byte("short"), []byte("x"), int64(-1))
	f.Fuzz(func(t *testing.T, ch, nonce []byte, now int64) {
		if c.Verify(ch, nonce, powUser, powProduct, now) != nil {
			return
		}
		raw, err := base64.RawURLEncoding.Strict().DecodeString(string(ch))
		if err != nil || len(raw) < 16 {
			t.Fatalf("accepted a challenge that does not decode: %q", ch)
		}
		m := hmac.New(sha256.New, key)
		m.Write(raw[:len(raw)-16])
		if !hmac.Equal(m.Sum(nil)[:16], raw[len(raw)-16:]) {
			t.Fatalf("accepted an unsigned challenge: %q", ch)
		}
		if productOf(string(ch)) != string(powProduct) || userOf(string(ch)) != string(powUser) {
			t.Fatalf("accepted another's challenge: %q", ch)
		}
		if exp := int64(binary.BigEndian.Uint64(raw[15:23])); now >= exp {
			t.Fatalf("accepted at %d a challenge expiring at %d", now, exp)
		}
		if leadingZeroBits(ch, nonce) < int(raw[1]) {
			t.Fatalf("accepted nonce %q without the work (%d bits asked)", nonce, raw[1])
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	c := NewChallenger(powSecret)
	ch := []byte(c.Issue(powUser, powProduct, 12, powNow))
	nonce := solve(ch, 12)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Verify(ch, nonce, powUser, powProduct, powNow); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIssue(b *testing.B) {
	c := NewChallenger(powSecret)
	b.ReportAllocs()
	for b.Loop() {
		c.Issue(powUser, powProduct, 12, powNow)
	}
}
