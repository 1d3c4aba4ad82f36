package session

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// verifyFresh is the full check alone: c has no table.
func verifyFresh(c *Codec, token []byte, now int64) (string, error) {
	out, err := c.Verify(token, now, nil)
	return string(out), err
}

// TestVerifiedCacheIsExact: once a token is remembered, every token that
// differs from it in one byte, is cut or extended, and the token itself at
// other times, get exactly the answer of the full check.
func TestVerifiedCacheIsExact(t *testing.T) {
	cached := mustCodec(t, secretA, secretB)
	fresh := mustCodec(t, secretA, secretB)
	fresh.verified = nil
	tokens := []string{
		mustSign(t, cached, "alice"),
		forge(secretB, hdrOK, `{"sub":"bob.b@x","nbf":1780000000,"exp":1780000100.5}`),
		forge(secretA, `{"typ":"JWT","alg":"HS256"}`, `{"sub":"carol","exp":1780003600,"iat":1}`),
	}
	times := []int64{now0 - 1, now0, now0 + 100, now0 + 101, now0 + 3599, now0 + 3600, now0 + 1<<40}
	for _, tok := range tokens {
		for range 2 {
			if _, err := cached.Verify([]byte(tok), now0, nil); err != nil {
				t.Fatalf("%s: %v", tok, err)
			}
		}
		if !remembered(cached, []byte(tok)) {
			t.Fatalf("%s was not remembered", tok)
		}
		var variants [][]byte
		for i := range len(tok) {
			for _, c := range []byte{'A', 'B', 'g', '_', '.', '='} {
				if tok[i] != c {
					v := []byte(tok)
					v[i] = c
					variants = append(variants, v)
				}
			}
		}
		variants = append(variants, []byte(tok[:len(tok)-1]), []byte(tok+"A"), []byte(tok+"."), []byte(" "+tok), []byte(tok))
		for _, v := range variants {
			for _, now := range times {
				got, gerr := cached.Verify(v, now, []byte("u:"))
				want, werr := verifyFresh(fresh, v, now)
				if want != "" {
					want = "u:" + want
				} else {
					want = "u:" // dst comes back as given on error
				}
				if string(got) != want || !errors.Is(gerr, werr) || (gerr == nil) != (werr == nil) {
					t.Fatalf("%q at %d: cached %q %v, full check %q %v", v, now, got, gerr, want, werr)
				}
			}
		}
	}
}

func remembered(c *Codec, tok []byte) bool {
	_, hit, _ := c.verified.place(tok).lookup(tok, now0, nil)
	return hit
}

// TestVerifiedCacheRemembersOnTheSecondPass: a session is remembered once
// it passed twice, and sessions that pass once each never push a
// remembered one out.
func TestVerifiedCacheRemembersOnTheSecondPass(t *testing.T) {
	c := mustCodec(t, secretA)
	alice := []byte(mustSign(t, c, "alice"))
	for pass := 1; pass <= 2; pass++ {
		if remembered(c, alice) {
			t.Fatalf("remembered before pass %d", pass)
		}
		if got, err := c.Verify(alice, now0, nil); err != nil || string(got) != "alice" {
			t.Fatalf("pass %d: %q %v", pass, got, err)
		}
	}
	if !remembered(c, alice) {
		t.Fatal("not remembered after two passes")
	}
	for i := range 3 * cacheSlots {
		tok := []byte(mustSign(t, c, fmt.Sprintf("once_%d", i)))
		if _, err := c.Verify(tok, now0, nil); err != nil {
			t.Fatal(err)
		}
	}
	if !remembered(c, alice) {
		t.Fatal("sessions seen once pushed a remembered one out")
	}
}

// TestVerifiedCacheEvicts: more sessions than slots, each sent again and
// again; each is answered right whether its slot holds it or another one
// took it, and the table holds no more than its slots.
func TestVerifiedCacheEvicts(t *testing.T) {
	c := mustCodec(t, secretA)
	n := 3 * cacheSlots
	toks := make([][]byte, n)
	for i := range toks {
		toks[i] = []byte(mustSign(t, c, fmt.Sprintf("user_%d", i)))
	}
	for round := range 4 {
		hits := 0
		for i, tok := range toks {
			if remembered(c, tok) {
				hits++
			}
			got, err := c.Verify(tok, now0, nil)
			if err != nil || string(got) != fmt.Sprintf("user_%d", i) {
				t.Fatalf("round %d, token %d: %q %v", round, i, got, err)
			}
		}
		if round < 2 && hits != 0 {
			t.Fatalf("round %d: %d hits before any token passed twice", round, hits)
		}
		if round == 3 && (hits == 0 || hits > cacheSlots) {
			t.Fatalf("round %d: %d of %d remembered, the table has %d slots", round, hits, n, cacheSlots)
		}
	}
}

// TestVerifiedCacheConcurrent: goroutines verifying overlapping sessions,
// some of them forged, each get their own answer (run with -race too).
func TestVerifiedCacheConcurrent(t *testing.T) {
	c := mustCodec(t, secretA)
	const users = 64
	toks := make([][]byte, users)
	forged := make([][]byte, users)
	for i := range toks {
		toks[i] = []byte(mustSign(t, c, fmt.Sprintf("u%d", i)))
		forged[i] = []byte(badSig(string(toks[i])))
	}
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := make([]byte, 0, 64)
			for k := range 4000 {
				i := (k*7 + g) % users
				got, err := c.Verify(toks[i], now0, dst[:0])
				if err != nil || !bytes.Equal(got, []byte(fmt.Sprintf("u%d", i))) {
					errc <- fmt.Errorf("u%d: %q %v", i, got, err)
					return
				}
				if _, err := c.Verify(forged[i], now0, dst[:0]); !errors.Is(err, ErrSignature) {
					errc <- fmt.Errorf("forged u%d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// TestVerifyMissAllocs: a token seen for the first time (checked in full,
// then remembered) allocates nothing either.
func TestVerifyMissAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under -race")
	}
	c := mustCodec(t, secretA)
	toks := make([][]byte, 300)
	for i := range toks {
		toks[i] = []byte(mustSign(t, c, fmt.Sprintf("user_%d", i)))
	}
	dst := make([]byte, 0, 64)
	i := 0
	n := testing.AllocsPerRun(200, func() {
		if _, err := c.Verify(toks[i], now0, dst[:0]); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if n != 0 {
		t.Fatalf("%v allocs per first Verify", n)
	}
}
