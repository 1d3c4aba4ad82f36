package session

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/orders/order"
)

var (
	secretA = []byte("0123456789abcdef0123456789abcdef-secret-A")
	secretB = []byte("fedcba9876543210fedcba9876543210-secret-B")
	// t0 is the fixed "now" of every test: no test reads the wall clock.
	t0    = time.Unix(1_780_000_000, 0)
	now0  = t0.Unix()
	ttl   = time.Hour
	hdrOK = `{"alg":"HS256","typ":"JWT"}`
)

func mustCodec(t testing.TB, secrets ...[]byte) *Codec {
	t.Helper()
	c, err := NewCodec(secrets, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustSign(t testing.TB, c *Codec, user string) string {
	t.Helper()
	tok, err := c.Sign(user, t0)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// forge builds a token from arbitrary header and claims JSON, correctly
// signed with secret: it plays a signer that writes what Sign never would.
func forge(secret []byte, header, claims string) string {
	enc := base64.RawURLEncoding
	in := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(in))
	return in + "." + enc.EncodeToString(m.Sum(nil))
}

func TestNewCodec(t *testing.T) {
	tests := []struct {
		name    string
		secrets [][]byte
		ttl     time.Duration
		ok      bool
	}{
		{"one secret", [][]byte{secretA}, ttl, true},
		{"two secrets", [][]byte{secretA, secretB}, ttl, true},
		{"exactly 32 bytes", [][]byte{bytes.Repeat([]byte("k"), 32)}, ttl, true},
		{"no secrets", nil, ttl, false},
		{"31 bytes", [][]byte{bytes.Repeat([]byte("k"), 31)}, ttl, false},
		{"short second secret", [][]byte{secretA, []byte("short")}, ttl, false},
		{"ttl below a second", [][]byte{secretA}, 999 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewCodec(tt.secrets, tt.ttl)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestNewCodecCopiesSecrets(t *testing.T) {
	s := append([]byte(nil), secretA...)
	c := mustCodec(t, s)
	tok := mustSign(t, c, "alice")
	s[0] ^= 0xff
	if _, err := c.Verify([]byte(tok), now0, nil); err != nil {
		t.Fatalf("caller mutating its secret changed the codec: %v", err)
	}
}

func TestRoundTrip(t *testing.T) {
	c := mustCodec(t, secretA)
	for _, user := range []string{"a", "alice", "user_42", "a.b@example.com", "x-y", strings.Repeat("z", 64)} {
		t.Run(user, func(t *testing.T) {
			tok := mustSign(t, c, user)
			got, err := c.Verify([]byte(tok), now0, []byte("prefix:"))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "prefix:"+user {
				t.Fatalf("got %q", got)
			}
			// The last second of validity, then the first second after.
			if _, err := c.Verify([]byte(tok), now0+int64(ttl/time.Second)-1, nil); err != nil {
				t.Fatalf("just before exp: %v", err)
			}
			if _, err := c.Verify([]byte(tok), now0+int64(ttl/time.Second), nil); !errors.Is(err, ErrExpired) {
				t.Fatalf("at exp: %v", err)
			}
		})
	}
}

func TestSignClaims(t *testing.T) {
	c := mustCodec(t, secretA)
	tok := mustSign(t, c, "alice")
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("%d segments", len(parts))
	}
	h, _ := base64.RawURLEncoding.DecodeString(parts[0])
	p, _ := base64.RawURLEncoding.DecodeString(parts[1])
	if string(h) != hdrOK {
		t.Errorf("header %s", h)
	}
	if want := `{"sub":"alice","iat":1780000000,"exp":1780003600}`; string(p) != want {
		t.Errorf("claims %s, want %s", p, want)
	}
}

func TestSignRejectsBadUserID(t *testing.T) {
	c := mustCodec(t, secretA)
	for _, u := range []string{"", "a b", `a"b`, "ä", strings.Repeat("z", 65)} {
		if _, err := c.Sign(u, t0); err == nil {
			t.Errorf("Sign(%q) succeeded", u)
		}
	}
}

func TestVerify(t *testing.T) {
	c := mustCodec(t, secretA)
	good := mustSign(t, c, "alice")
	parts := strings.Split(good, ".")
	exp := "1780003600"
	signed := func(claimsJSON string) string { return forge(secretA, hdrOK, claimsJSON) }
	header := func(h string) string { return forge(secretA, h, `{"sub":"alice","exp":`+exp+`}`) }
	// A MAC segment whose last character carries non-zero padding bits
	// decodes, leniently, to the same MAC: only the strict decoder refuses it.
	sig := []byte(parts[2])
	sig[len(sig)-1] = flipLowBits(sig[len(sig)-1])

	tests := []struct {
		name  string
		token string
		now   int64
		want  error
	}{
		{"valid", good, now0, nil},
		{"valid, forged by a signer with the same key", signed(`{"sub":"alice","exp":` + exp + `}`), now0, nil},
		{"empty", "", now0, ErrMissing},

		{"tampered payload", parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"mallory","iat":1780000000,"exp":1780003600}`)) + "." + parts[2], now0, ErrSignature},
		{"tampered header", base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT","x":1}`)) + "." + parts[1] + "." + parts[2], now0, ErrSignature},
		{"tampered signature", parts[0] + "." + parts[1] + "." + flipFirst(parts[2]), now0, ErrSignature},
		{"wrong secret", forge(secretB, hdrOK, `{"sub":"alice","exp":`+exp+`}`), now0, ErrSignature},
		{"signature of another token", parts[0] + "." + parts[1] + "." + strings.Split(mustSign(t, c, "bob"), ".")[2], now0, ErrSignature},
		{"non-canonical signature bits", parts[0] + "." + parts[1] + "." + string(sig), now0, ErrMalformed},

		{"alg none, no signature", forgeNone(`{"alg":"none"}`, `{"sub":"alice","exp":`+exp+`}`), now0, ErrMalformed},
		{"alg none, signed", header(`{"alg":"none","typ":"JWT"}`), now0, ErrMalformed},
		{"alg HS512", header(`{"alg":"HS512","typ":"JWT"}`), now0, ErrMalformed},
		{"alg RS256", header(`{"alg":"RS256","typ":"JWT"}`), now0, ErrMalformed},
		{"alg lower case", header(`{"alg":"hs256"}`), now0, ErrMalformed},
		{"alg escaped", header(`{"alg":"HS\u0032\u0035\u0036"}`), now0, ErrMalformed},
		{"alg not a string", header(`{"alg":256}`), now0, ErrMalformed},
		{"alg missing", header(`{"typ":"JWT"}`), now0, ErrMalformed},
		{"alg twice", header(`{"alg":"HS256","alg":"none"}`), now0, ErrMalformed},
		{"alg key escaped", header(`{"\u0061lg":"none","alg":"HS256"}`), now0, ErrMalformed},
		{"crit header", header(`{"alg":"HS256","crit":["exp"]}`), now0, ErrMalformed},
		{"header reordered", header(` {"typ":"JWT", "kid":"k1", "alg":"HS256"} `), now0, nil},
		{"header not an object", header(`["alg","HS256"]`), now0, ErrMalformed},

		{"expired", good, now0 + 3600, ErrExpired},
		{"expired long ago", good, now0 + 1e9, ErrExpired},
		{"nbf in the future", signed(`{"sub":"alice","nbf":1780000001,"exp":` + exp + `}`), now0, ErrExpired},
		{"nbf now", signed(`{"sub":"alice","nbf":1780000000,"exp":` + exp + `}`), now0, nil},
		{"nbf fraction rounds up", signed(`{"sub":"alice","nbf":1779999999.5,"exp":` + exp + `}`), now0, nil},
		{"nbf fraction in the future", signed(`{"sub":"alice","nbf":1780000000.1,"exp":` + exp + `}`), now0, ErrExpired},
		{"exp fraction still valid", signed(`{"sub":"alice","exp":1780000000.5}`), now0, nil},
		{"exp fraction just past", signed(`{"sub":"alice","exp":1779999999.5}`), now0, ErrExpired},
		{"exp zero fraction", signed(`{"sub":"alice","exp":1780000000.000}`), now0, ErrExpired},
		{"exp negative", signed(`{"sub":"alice","exp":-5}`), now0, ErrExpired},
		{"exp exponent", signed(`{"sub":"alice","exp":1.8e9}`), now0, ErrMalformed},
		{"exp 19 digits", signed(`{"sub":"alice","exp":1000000000000000000}`), now0, ErrMalformed},
		{"exp 18 digits", signed(`{"sub":"alice","exp":999999999999999999}`), now0, nil},
		{"exp string", signed(`{"sub":"alice","exp":"1780003600"}`), now0, ErrMalformed},
		{"exp missing", signed(`{"sub":"alice"}`), now0, ErrMalformed},
		{"exp twice", signed(`{"sub":"alice","exp":1,"exp":` + exp + `}`), now0, ErrMalformed},
		{"nbf twice", signed(`{"sub":"alice","nbf":1,"nbf":2,"exp":` + exp + `}`), now0, ErrMalformed},
		{"nbf string", signed(`{"sub":"alice","nbf":"1","exp":` + exp + `}`), now0, ErrMalformed},

		{"sub missing", signed(`{"exp":` + exp + `}`), now0, ErrMalformed},
		{"sub empty", signed(`{"sub":"","exp":` + exp + `}`), now0, ErrMalformed},
		{"sub escaped", signed(`{"sub":"al\u0069ce","exp":` + exp + `}`), now0, ErrMalformed},
		{"sub with quote escape", signed(`{"sub":"a\"b","exp":` + exp + `}`), now0, ErrMalformed},
		{"sub bad char", signed(`{"sub":"a/b","exp":` + exp + `}`), now0, ErrMalformed},
		{"sub 65 bytes", signed(`{"sub":"` + strings.Repeat("a", 65) + `","exp":` + exp + `}`), now0, ErrMalformed},
		{"sub number", signed(`{"sub":42,"exp":` + exp + `}`), now0, ErrMalformed},
		{"sub twice", signed(`{"sub":"alice","sub":"bob","exp":` + exp + `}`), now0, ErrMalformed},
		{"sub key escaped", signed(`{"s\u0075b":"bob","sub":"alice","exp":` + exp + `}`), now0, ErrMalformed},
		{"unknown claims ignored", signed(` { "iss" : "shop", "aud":["a",{"b":[1,2.5e3,-0,true,false,null]}], "x":"\u00e9\n", "sub":"alice", "exp":` + exp + ` } `), now0, nil},
		{"unknown claim too deep", signed(`{"sub":"alice","exp":` + exp + `,"x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`), now0, ErrMalformed},
		{"trailing garbage", signed(`{"sub":"alice","exp":` + exp + `}x`), now0, ErrMalformed},
		{"two objects", signed(`{"sub":"alice","exp":` + exp + `}{}`), now0, ErrMalformed},
		{"trailing comma", signed(`{"sub":"alice","exp":` + exp + `,}`), now0, ErrMalformed},
		{"claims not JSON", signed(`sub=alice`), now0, ErrMalformed},
		{"claims empty object", signed(`{}`), now0, ErrMalformed},
		{"claims empty", signed(``), now0, ErrMalformed},
		{"unterminated string", signed(`{"sub":"alice","exp":` + exp + `,"x":"abc}`), now0, ErrMalformed},
		{"bad escape", signed(`{"sub":"alice","exp":` + exp + `,"x":"\q"}`), now0, ErrMalformed},
		{"raw control char", signed("{\"sub\":\"alice\",\"exp\":" + exp + ",\"x\":\"a\tb\"}"), now0, ErrMalformed},
		{"leading zero number", signed(`{"sub":"alice","exp":` + exp + `,"x":01}`), now0, ErrMalformed},

		{"two segments", parts[0] + "." + parts[1], now0, ErrMalformed},
		{"four segments", good + "." + parts[2], now0, ErrMalformed},
		{"empty header", "." + parts[1] + "." + parts[2], now0, ErrMalformed},
		{"empty payload", parts[0] + ".." + parts[2], now0, ErrMalformed},
		{"empty signature", parts[0] + "." + parts[1] + ".", now0, ErrMalformed},
		{"short signature", good[:len(good)-1], now0, ErrMalformed},
		{"padded signature", good + "=", now0, ErrMalformed},
		{"standard base64 alphabet", parts[0] + "." + parts[1] + "." + "+" + parts[2][1:], now0, ErrMalformed},
		{"newline in payload", parts[0] + "." + parts[1][:5] + "\n" + parts[1][5:] + "." + parts[2], now0, ErrMalformed},
		{"space", " " + good, now0, ErrMalformed},
		{"bad base64 length", parts[0] + "A." + parts[1] + "." + parts[2], now0, ErrMalformed},
		{"payload not base64 but signed", forgeRaw(secretA, headerB64Str(), "A"), now0, ErrMalformed},
		{"header not base64 JSON", "bm90IGpzb24." + parts[1] + "." + parts[2], now0, ErrMalformed},
		{"too long", parts[0] + "." + strings.Repeat("A", 4096) + "." + parts[2], now0, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []byte("keep")
			got, err := c.Verify([]byte(tt.token), tt.now, dst)
			switch {
			case tt.want == errAny:
				if err == nil {
					t.Fatal("accepted")
				}
			case !errors.Is(err, tt.want):
				t.Fatalf("err = %v, want %v", err, tt.want)
			case err == nil && string(got) != "keepalice":
				t.Fatalf("got %q", got)
			case err != nil && string(got) != "keep":
				t.Fatalf("dst changed on error: %q", got)
			}
		})
	}
}

// errAny marks a case where any error is right.
var errAny = errors.New("any")

func flipFirst(s string) string {
	b := []byte(s)
	if b[0] == 'A' {
		b[0] = 'B'
	} else {
		b[0] = 'A'
	}
	return string(b)
}

// flipLowBits changes a base64url character so that only the two low bits of
// its 6-bit value differ: in the last character of a 43-character MAC those
// are padding bits.
func flipLowBits(c byte) byte {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, c)
	return alphabet[i^1]
}

func badSig(tok string) string {
	i := strings.LastIndexByte(tok, '.')
	return tok[:i+1] + flipFirst(tok[i+1:])
}

func forgeNone(header, claims string) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims)) + "."
}

func TestKeyRotation(t *testing.T) {
	oldC := mustCodec(t, secretA)
	newC := mustCodec(t, secretB)
	both := mustCodec(t, secretB, secretA) // mid-rotation: B signs, A still verifies
	oldTok := []byte(mustSign(t, oldC, "alice"))
	newTok := []byte(mustSign(t, newC, "bob"))
	bothTok := []byte(mustSign(t, both, "carol"))

	tests := []struct {
		name  string
		c     *Codec
		token []byte
		want  error
	}{
		{"rotated codec accepts old key", both, oldTok, nil},
		{"rotated codec accepts new key", both, newTok, nil},
		{"rotated codec signs with first", newC, bothTok, nil},
		{"old codec refuses new key", oldC, bothTok, ErrSignature},
		{"new codec refuses old key", newC, oldTok, ErrSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.c.Verify(tt.token, now0, nil); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestFromRequest(t *testing.T) {
	tests := []struct {
		name   string
		auth   string
		cookie string
		want   string
	}{
		{"nothing", "", "", ""},
		{"cookie", "", "c.o.okie", "c.o.okie"},
		{"bearer", "Bearer b.e.arer", "", "b.e.arer"},
		{"bearer wins over cookie", "Bearer b.e.arer", "c.o.okie", "b.e.arer"},
		{"scheme case-insensitive", "bEaReR tok", "", "tok"},
		{"extra spaces", "Bearer   tok  ", "", "tok"},
		{"basic falls back to cookie", "Basic dXNlcjpwYXNz", "c.o.okie", "c.o.okie"},
		{"empty bearer falls back to cookie", "Bearer ", "c.o.okie", "c.o.okie"},
		{"scheme without space", "Bearertok", "", ""},
		{"bearer only", "Bearer", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			if tt.auth != "" {
				ctx.Request.Header.Set("Authorization", tt.auth)
			}
			if tt.cookie != "" {
				ctx.Request.Header.SetCookie("other", "x")
				ctx.Request.Header.SetCookie(CookieName, tt.cookie)
			}
			got := FromRequest(&ctx)
			if string(got) != tt.want || (tt.want == "" && got != nil) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestVerifyAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under -race")
	}
	c := mustCodec(t, secretB, secretA)
	tokens := map[string][]byte{
		"first key":        []byte(mustSign(t, c, "alice")),
		"second key":       []byte(mustSign(t, mustCodec(t, secretA), "alice")),
		"parsed header":    []byte(forge(secretA, `{"typ":"JWT","alg":"HS256"}`, `{"sub":"alice","exp":1780003600,"x":[1,{"y":"z"}]}`)),
		"bad signature":    []byte(badSig(mustSign(t, c, "alice"))),
		"empty":            nil,
		"expired":          []byte(mustSign(t, c, "alice")),
		"garbage":          []byte("not a token"),
		"wrong secret":     []byte(mustSign(t, mustCodec(t, []byte("another secret that is long enough!!")), "alice")),
		"malformed claims": []byte(forge(secretA, hdrOK, `{"sub":"alice"`)),
	}
	dst := make([]byte, 0, 64)
	for name, tok := range tokens {
		t.Run(name, func(t *testing.T) {
			if n := testing.AllocsPerRun(200, func() { _, _ = c.Verify(tok, now0, dst[:0]) }); n != 0 {
				t.Fatalf("%v allocs per Verify", n)
			}
		})
	}
}

func TestFromRequestAllocs(t *testing.T) {
	for _, auth := range []string{"", "Bearer b.e.arer"} {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetCookie(CookieName, "c.o.okie")
		if auth != "" {
			ctx.Request.Header.Set("Authorization", auth)
		}
		if n := testing.AllocsPerRun(200, func() { _ = FromRequest(&ctx) }); n != 0 {
			t.Fatalf("auth %q: %v allocs per FromRequest", auth, n)
		}
	}
}

// FuzzVerify feeds mutations of real tokens. Verify must never panic, and it
// may only accept a token this codec signed, byte for byte: every other
// spelling is either refused by the canonical-encoding rules or a MAC
// forgery.
func FuzzVerify(f *testing.F) {
	c := mustCodec(f, secretA, secretB)
	issued := map[string]bool{}
	for _, u := range []string{"alice", "bob", "a.b@example.com"} {
		tok := mustSign(f, c, u)
		issued[tok] = true
		f.Add([]byte(tok), now0)
	}
	tokB := mustSign(f, mustCodec(f, secretB), "carol")
	issued[tokB] = true
	f.Add([]byte(tokB), now0)
	f.Add([]byte(forge([]byte("a different secret of 32 bytes!!"), hdrOK, `{"sub":"x","exp":9999999999}`)), now0)
	f.Add([]byte(forgeNone(`{"alg":"none"}`, `{"sub":"x","exp":9999999999}`)), now0)
	f.Add([]byte("a.b.c"), int64(0))
	f.Add([]byte(".."), int64(-1))
	f.Fuzz(func(t *testing.T, token []byte, now int64) {
		got, err := c.Verify(token, now, nil)
		if err != nil {
			if got != nil {
				t.Fatalf("dst grew on error %v", err)
			}
			return
		}
		if !issued[string(token)] {
			t.Fatalf("accepted a token the codec never signed: %q", token)
		}
		if !order.ValidUserID(got) {
			t.Fatalf("accepted user id %q", got)
		}
	})
}

// FuzzClaims checks the hand parser against encoding/json: whatever it
// accepts must be valid JSON with the same "sub", and a sane "exp". The
// claims parser only ever sees MAC-verified input, so it is fuzzed directly.
func FuzzClaims(f *testing.F) {
	for _, s := range []string{
		`{"sub":"alice","iat":1780000000,"exp":1780003600}`,
		`{"sub":"alice","exp":1.5,"nbf":-3}`,
		`{"x":{"y":[1,"\u00e9",true,null]},"sub":"a","exp":1}`,
		`{"sub":"a\\b","exp":1}`,
		`{"sub":"a","exp":1e3}`,
		` { } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, ok := parseClaims(b)
		if !ok {
			return
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatalf("accepted %q, encoding/json says %v", b, err)
		}
		if d.More() {
			t.Fatalf("accepted %q with trailing data", b)
		}
		if order.ValidUserID(c.sub) && m["sub"] != string(c.sub) {
			t.Fatalf("sub %q, encoding/json reads %#v", c.sub, m["sub"])
		}
		n, isNum := m["exp"].(json.Number)
		if !isNum {
			t.Fatalf("exp %#v", m["exp"])
		}
		if fl, err := n.Float64(); err != nil || fl > float64(c.exp) || fl <= float64(c.exp)-1 {
			t.Fatalf("exp %s read as %d", n, c.exp)
		}
	})
}

// FuzzHeader checks that an accepted header says alg HS256 to encoding/json.
func FuzzHeader(f *testing.F) {
	f.Add([]byte(hdrOK))
	f.Add([]byte(`{"alg":"none"}`))
	f.Add([]byte(`{"kid":"\u0041","alg":"HS256","crit":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !headerOK(b) {
			return
		}
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if err := d.Decode(&m); err != nil || d.More() {
			t.Fatalf("accepted %q, encoding/json says %v", b, err)
		}
		if m["alg"] != "HS256" {
			t.Fatalf("accepted %q, alg %#v", b, m["alg"])
		}
		if _, ok := m["crit"]; ok {
			t.Fatalf("accepted crit in %q", b)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	bench := func(b *testing.B, c *Codec, tok []byte) {
		dst := make([]byte, 0, 64)
		b.ReportAllocs()
		b.SetBytes(int64(len(tok)))
		for b.Loop() {
			if _, err := c.Verify(tok, now0, dst[:0]); err != nil {
				b.Fatal(err)
			}
		}
	}
	c := mustCodec(b, secretA, secretB)
	// The same token every call: remembered after the first (cache.go).
	b.Run("first key", func(b *testing.B) { bench(b, c, []byte(mustSign(b, c, "user_1234567"))) })
	b.Run("first key, full check", func(b *testing.B) {
		full := mustCodec(b, secretA, secretB)
		full.verified = nil
		bench(b, full, []byte(mustSign(b, full, "user_1234567")))
	})
	// A different session every call, more of them than the table holds:
	// mostly checked in full and then remembered.
	b.Run("first key, new tokens", func(b *testing.B) {
		toks := make([][]byte, 3*cacheSlots)
		for i := range toks {
			toks[i] = []byte(mustSign(b, c, "user_"+strconv.Itoa(i)))
		}
		dst := make([]byte, 0, 64)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := c.Verify(toks[i], now0, dst[:0]); err != nil {
				b.Fatal(err)
			}
			if i++; i == len(toks) {
				i = 0
			}
		}
	})
	b.Run("second key", func(b *testing.B) { bench(b, c, []byte(mustSign(b, mustCodec(b, secretB), "user_1234567"))) })
	b.Run("parsed header", func(b *testing.B) {
		bench(b, c, []byte(forge(secretA, `{"typ":"JWT","alg":"HS256"}`, `{"sub":"user_1234567","iat":1780000000,"exp":1780003600}`)))
	})
	b.Run("parallel", func(b *testing.B) {
		tok := []byte(mustSign(b, c, "user_1234567"))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			dst := make([]byte, 0, 64)
			for pb.Next() {
				if _, err := c.Verify(tok, now0, dst[:0]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func BenchmarkFromRequest(b *testing.B) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetCookie("theme", "dark")
	ctx.Request.Header.SetCookie(CookieName, "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.e30.sig")
	b.ReportAllocs()
	for b.Loop() {
		_ = FromRequest(&ctx)
	}
}

func BenchmarkSign(b *testing.B) {
	c := mustCodec(b, secretA)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Sign("user_1234567", t0); err != nil {
			b.Fatal(err)
		}
	}
}

func headerB64Str() string { return string(headerB64) }

// forgeRaw signs already-encoded segments, so that they can be invalid.
func forgeRaw(secret []byte, h, p string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(h + "." + p))
	return h + "." + p + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// TestByteTables: Verify's tables agree with the strict decoder about every
// byte: which are the alphabet, and which end a MAC segment it refuses.
func TestByteTables(t *testing.T) {
	for c := range 256 {
		ch := string([]byte{byte(c)})
		_, err := b64.DecodeString("AAA" + ch)
		inAlphabet := err == nil && c != '\r' && c != '\n'
		if got := b64Class[c] == classB64; got != inAlphabet {
			t.Errorf("byte %#x: in the alphabet %v, table says %v", c, inAlphabet, got)
		}
		if (b64Class[c] == classDot) != (c == '.') {
			t.Errorf("byte %#x: dot class wrong", c)
		}
		if !inAlphabet {
			continue
		}
		_, err = b64.DecodeString(strings.Repeat("A", sigB64Len-1) + ch)
		if refused := err != nil; refused != b64Low2[c] {
			t.Errorf("MAC segment ending in %q: decoder refuses %v, table says %v", ch, refused, b64Low2[c])
		}
	}
}
