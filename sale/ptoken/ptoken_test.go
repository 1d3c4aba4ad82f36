package ptoken

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

var (
	secret  = []byte("0123456789abcdef0123456789abcdef-ptoken")
	user    = []byte("alice")
	product = []byte("p1")
	// now0 is the fixed clock of every test (Unix ms).
	now0 = int64(1_780_000_000_000)
	exp0 = now0 + 30_000
)

func mustNew(t testing.TB, s []byte) *Minter {
	t.Helper()
	m, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNew(t *testing.T) {
	if _, err := New(bytes.Repeat([]byte("k"), 31)); err == nil {
		t.Fatal("31-byte secret accepted")
	}
	s := bytes.Repeat([]byte("k"), 32)
	m := mustNew(t, s)
	tok := m.Mint(nil, user, product, exp0)
	s[0] = 'x'
	if _, _, err := m.Check(tok, user, product, now0); err != nil {
		t.Fatalf("caller mutating its secret changed the minter: %v", err)
	}
}

func TestRoundTrip(t *testing.T) {
	m := mustNew(t, secret)
	dst := []byte("prefix:")
	tok := m.Mint(dst, user, product, exp0)
	if !bytes.HasPrefix(tok, []byte("prefix:")) {
		t.Fatalf("Mint did not append: %q", tok)
	}
	tok = tok[len("prefix:"):]
	if len(tok) != TokenLen || TokenLen != 50 {
		t.Fatalf("len %d, TokenLen %d", len(tok), TokenLen)
	}
	if strings.ContainsAny(string(tok), "+/=") {
		t.Fatalf("not URL-safe: %q", tok)
	}
	nonce, exp, err := m.Check(tok, user, product, now0)
	if err != nil {
		t.Fatal(err)
	}
	if exp != exp0 {
		t.Fatalf("exp %d", exp)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(string(tok))
	if !bytes.Equal(nonce[:], raw[1:13]) {
		t.Fatalf("nonce %x, token holds %x", nonce, raw[1:13])
	}
	// The last millisecond of validity, then expiry.
	if _, _, err := m.Check(tok, user, product, exp0-1); err != nil {
		t.Fatalf("just before expiry: %v", err)
	}
	if _, _, err := m.Check(tok, user, product, exp0); !errors.Is(err, ErrExpired) {
		t.Fatalf("at expiry: %v", err)
	}
}

// TestLayout recomputes the documented MAC independently, pinning the format
// that other implementations (a token service in another language) rely on.
func TestLayout(t *testing.T) {
	m := mustNew(t, secret)
	raw, err := base64.RawURLEncoding.DecodeString(string(m.Mint(nil, user, product, exp0)))
	if err != nil || len(raw) != 37 {
		t.Fatalf("raw %x, %v", raw, err)
	}
	if raw[0] != 1 || int64(binary.BigEndian.Uint64(raw[13:21])) != exp0 {
		t.Fatalf("header %x", raw[:21])
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(raw[:21])
	mac.Write([]byte{0, 0, 0, 5})
	mac.Write(user)
	mac.Write([]byte{0, 0, 0, 2})
	mac.Write(product)
	if want := mac.Sum(nil)[:16]; !bytes.Equal(raw[21:], want) {
		t.Fatalf("tag %x, want %x", raw[21:], want)
	}
}

func TestNoncesDiffer(t *testing.T) {
	m := mustNew(t, secret)
	seen := map[[NonceLen]byte]bool{}
	for i := 0; i < 10000; i++ {
		n, _, err := m.Check(m.Mint(nil, user, product, exp0), user, product, now0)
		if err != nil {
			t.Fatal(err)
		}
		if seen[n] {
			t.Fatalf("nonce %x repeated", n)
		}
		seen[n] = true
	}
}

func TestCheck(t *testing.T) {
	m := mustNew(t, secret)
	good := m.Mint(nil, user, product, exp0)
	other := mustNew(t, []byte("another secret, also 32 bytes or more"))
	raw, _ := base64.RawURLEncoding.DecodeString(string(good))
	reenc := func(edit func(r []byte)) []byte {
		r := append([]byte(nil), raw...)
		edit(r)
		return []byte(base64.RawURLEncoding.EncodeToString(r))
	}
	last := []byte(string(good))
	last[len(last)-1] = flipLowBits(last[len(last)-1])

	tests := []struct {
		name    string
		token   []byte
		user    []byte
		product []byte
		now     int64
		want    error
	}{
		{"valid", good, user, product, now0, nil},
		{"other user", good, []byte("bob"), product, now0, ErrForged},
		{"other product", good, user, []byte("p2"), now0, ErrForged},
		{"user/product boundary moved", m.Mint(nil, []byte("ab"), []byte("c"), exp0), []byte("a"), []byte("bc"), now0, ErrForged},
		{"empty user", good, nil, product, now0, ErrForged},
		{"other secret", other.Mint(nil, user, product, exp0), user, product, now0, ErrForged},
		{"expiry extended", reenc(func(r []byte) { r[20]++ }), user, product, now0, ErrForged},
		{"nonce changed", reenc(func(r []byte) { r[5] ^= 1 }), user, product, now0, ErrForged},
		{"tag changed", reenc(func(r []byte) { r[36] ^= 0x80 }), user, product, now0, ErrForged},
		{"forged and expired", reenc(func(r []byte) { r[36] ^= 0x80 }), user, product, exp0 + 1, ErrForged},
		{"expired", good, user, product, exp0, ErrExpired},
		{"expired long ago", good, user, product, exp0 + 1e12, ErrExpired},
		{"other version", reenc(func(r []byte) { r[0] = 2 }), user, product, now0, ErrMalformed},
		{"empty", nil, user, product, now0, ErrMalformed},
		{"truncated", good[:TokenLen-1], user, product, now0, ErrMalformed},
		{"too long", append(append([]byte(nil), good...), 'A'), user, product, now0, ErrMalformed},
		{"padded", append(append([]byte(nil), good[:TokenLen-2]...), '=', '='), user, product, now0, ErrMalformed},
		{"standard alphabet", append([]byte("+/"), good[2:]...), user, product, now0, ErrMalformed},
		{"newline", append(append([]byte(nil), good[:TokenLen-1]...), '\n'), user, product, now0, ErrMalformed},
		{"non-canonical last char", last, user, product, now0, ErrMalformed},
		{"garbage", bytes.Repeat([]byte("!"), TokenLen), user, product, now0, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nonce, exp, err := m.Check(tt.token, tt.user, tt.product, tt.now)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if err != nil && (nonce != [NonceLen]byte{} || exp != 0) {
				t.Fatalf("error %v with nonce %x exp %d", err, nonce, exp)
			}
		})
	}
}

// flipLowBits changes the low bits of a base64url character's value: in the
// last character of a 37-byte encoding those are padding bits.
func flipLowBits(c byte) byte {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	return alphabet[strings.IndexByte(alphabet, c)^1]
}

func TestNonceHex(t *testing.T) {
	n := [NonceLen]byte{0x00, 0x01, 0xab, 0xff, 0x10, 0x9c, 0, 0, 0, 0, 0x7f, 0x80}
	got := NonceHex([]byte("sk:{p1}:t:"), n)
	if want := "sk:{p1}:t:" + hex.EncodeToString(n[:]); string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under -race")
	}
	m := mustNew(t, secret)
	tok := m.Mint(nil, user, product, exp0)
	forged := m.Mint(nil, user, []byte("p2"), exp0)
	dst := make([]byte, 0, 128)
	var n [NonceLen]byte
	cases := map[string]func(){
		"Mint":            func() { dst = m.Mint(dst[:0], user, product, exp0) },
		"Check":           func() { n, _, _ = m.Check(tok, user, product, now0) },
		"Check forged":    func() { _, _, _ = m.Check(forged, user, product, now0) },
		"Check malformed": func() { _, _, _ = m.Check(tok[:10], user, product, now0) },
		"NonceHex":        func() { dst = NonceHex(dst[:0], n) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			if a := testing.AllocsPerRun(500, f); a != 0 {
				t.Fatalf("%v allocs per run", a)
			}
		})
	}
}

// mintFixed builds a token from the documented layout with a chosen nonce,
// independently of Mint, so that fuzz seeds are the same in every fuzz
// worker process.
func mintFixed(secret []byte, nonce byte, user, product []byte, exp int64) []byte {
	raw := make([]byte, 21, 37)
	raw[0] = 1
	for i := 1; i < 13; i++ {
		raw[i] = nonce
	}
	binary.BigEndian.PutUint64(raw[13:], uint64(exp))
	mac := hmac.New(sha256.New, secret)
	mac.Write(raw)
	mac.Write(binary.BigEndian.AppendUint32(nil, uint32(len(user))))
	mac.Write(user)
	mac.Write(binary.BigEndian.AppendUint32(nil, uint32(len(product))))
	mac.Write(product)
	raw = append(raw, mac.Sum(nil)[:16]...)
	return []byte(base64.RawURLEncoding.EncodeToString(raw))
}

func TestIndependentMint(t *testing.T) {
	m := mustNew(t, secret)
	tok := mintFixed(secret, 0xab, user, product, exp0)
	nonce, exp, err := m.Check(tok, user, product, now0)
	if err != nil || exp != exp0 || nonce != [NonceLen]byte{0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab} {
		t.Fatalf("nonce %x exp %d err %v", nonce, exp, err)
	}
}

// FuzzCheck: Check must never panic, and must accept only tokens issued for
// exactly this user and product: any other spelling would be a MAC forgery
// or a second encoding of the same bytes, which the strict decoding refuses.
func FuzzCheck(f *testing.F) {
	m := mustNew(f, secret)
	issued := map[string]bool{}
	for i, p := range []string{"p1", "p2", ""} {
		tok := mintFixed(secret, byte(i), user, []byte(p), exp0)
		issued[string(tok)+"|"+p] = true
		f.Add(tok, []byte(p), now0)
	}
	f.Add(mintFixed([]byte("some other secret of enough length"), 9, user, product, exp0), product, now0)
	f.Add(bytes.Repeat([]byte("A"), TokenLen), product, int64(0))
	f.Add([]byte("short"), product, int64(-1))
	f.Fuzz(func(t *testing.T, token, prod []byte, now int64) {
		nonce, exp, err := m.Check(token, user, prod, now)
		if err != nil {
			return
		}
		if !issued[string(token)+"|"+string(prod)] {
			t.Fatalf("accepted %q for product %q", token, prod)
		}
		if exp <= now || exp != exp0 {
			t.Fatalf("accepted with exp %d now %d nonce %x", exp, now, nonce)
		}
	})
}

func BenchmarkMint(b *testing.B) {
	m := mustNew(b, secret)
	dst := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		dst = m.Mint(dst[:0], user, product, exp0)
	}
}

func BenchmarkCheck(b *testing.B) {
	m := mustNew(b, secret)
	tok := m.Mint(nil, user, product, exp0)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := m.Check(tok, user, product, now0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckParallel(b *testing.B) {
	m := mustNew(b, secret)
	tok := m.Mint(nil, user, product, exp0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := m.Check(tok, user, product, now0); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRandRead is the nonce's share of BenchmarkMint, measured to back
// the choice of crypto/rand over a seeded generator.
func BenchmarkRandRead(b *testing.B) {
	var buf [NonceLen]byte
	p := &buf
	b.ReportAllocs()
	for b.Loop() {
		rand.Read(p[:])
	}
}
