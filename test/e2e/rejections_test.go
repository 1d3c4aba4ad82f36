package e2e

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashgate/internal/redistest"
	"flashgate/sale/session"
)

// TestRejections: every malformed, forged, replayed or out-of-window call
// is refused with the contract's status and code, and none of them moves
// stock or writes an outbox entry.
func TestRejections(t *testing.T) {
	r := redistest.New(t)
	rd := openRedis(t, r.Addr())
	e := startEdge(t, r.Addr(), activities(
		sale("r1", 10, 2),
		sale("r2", 10, 2),
		saleAt("soon", 10, 2, "+1h", "+2h"),
		saleAt("past", 10, 2, "2020-01-01T00:00:00Z", "2020-01-02T00:00:00Z"),
	))
	j := newJWTs(t, sessionSecret)
	products := []string{"r1", "r2", "soon", "past"}

	mint := func(t *testing.T, user, product string) string {
		t.Helper()
		res, tok, err := e.token(j.get(user), product)
		if err != nil || res.status != 200 || tok == "" {
			t.Fatalf("token for %s/%s: %v %v", user, product, res, err)
		}
		return tok
	}
	doBody := func(product, token, qty string) []byte {
		return []byte(`{"productId":"` + product + `","token":"` + token + `","quantity":` + qty + `}`)
	}

	now := time.Now()
	expired := func() string {
		c, err := session.NewCodec([][]byte{[]byte(sessionSecret)}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := c.Sign("late", now.Add(-2*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}()
	b64 := base64.RawURLEncoding.EncodeToString
	claims := `{"sub":"mallory","iat":` + strconv.FormatInt(now.Unix(), 10) + `,"exp":` + strconv.FormatInt(now.Add(time.Hour).Unix(), 10) + `}`
	algNone := b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + b64([]byte(claims)) + "."
	// A valid token whose subject is swapped after signing.
	valid := j.get("alice")
	parts := strings.Split(valid, ".")
	tampered := parts[0] + "." + b64([]byte(strings.Replace(string(mustB64(t, parts[1])), `"alice"`, `"mallory"`, 1))) + "." + parts[2]

	type call struct {
		method, path, jwt string
		body              []byte
	}
	cases := []struct {
		name   string
		prep   func(t *testing.T) call // may buy: runs before the snapshot
		status int
		code   string
	}{
		{"token replay", func(t *testing.T) call {
			tok := mint(t, "replayer", "r1")
			if res, _ := e.buy(j.get("replayer"), "r1", tok, 1); res.status != 200 {
				t.Fatalf("first use of the token: %v", res)
			}
			return call{"POST", "/api/seckill/do", j.get("replayer"), doBody("r1", tok, "1")}
		}, 403, "BAD_TOKEN"},
		{"no session", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", "", doBody("r1", mint(t, "u1", "r1"), "1")}
		}, 401, "UNAUTHENTICATED"},
		{"no session (token)", func(t *testing.T) call {
			return call{"POST", "/api/seckill/token", "", []byte(`{"productId":"r1"}`)}
		}, 401, "UNAUTHENTICATED"},
		{"forged JWT", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", newJWTs(t, otherSecret).get("u1"), doBody("r1", mint(t, "u1", "r1"), "1")}
		}, 401, "UNAUTHENTICATED"},
		{"forged JWT (token)", func(t *testing.T) call {
			return call{"POST", "/api/seckill/token", newJWTs(t, otherSecret).get("u1"), []byte(`{"productId":"r1"}`)}
		}, 401, "UNAUTHENTICATED"},
		{"expired JWT", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", expired, doBody("r1", mint(t, "late", "r1"), "1")}
		}, 401, "UNAUTHENTICATED"},
		{"alg none JWT", func(t *testing.T) call {
			return call{"POST", "/api/seckill/token", algNone, []byte(`{"productId":"r1"}`)}
		}, 401, "UNAUTHENTICATED"},
		{"tampered JWT", func(t *testing.T) call {
			return call{"POST", "/api/seckill/token", tampered, []byte(`{"productId":"r1"}`)}
		}, 401, "UNAUTHENTICATED"},
		{"another user's purchase token", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("thief"), doBody("r1", mint(t, "owner", "r1"), "1")}
		}, 403, "BAD_TOKEN"},
		{"token for another product", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u2"), doBody("r1", mint(t, "u2", "r2"), "1")}
		}, 403, "BAD_TOKEN"},
		{"garbage token", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u2"), doBody("r1", "not-a-token", "1")}
		}, 403, "BAD_TOKEN"},
		{"unknown product", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u3"), doBody("nope", mint(t, "u3", "r1"), "1")}
		}, 404, "UNKNOWN_PRODUCT"},
		{"unknown product (token)", func(t *testing.T) call {
			return call{"POST", "/api/seckill/token", j.get("u3"), []byte(`{"productId":"nope"}`)}
		}, 404, "UNKNOWN_PRODUCT"},
		{"quantity 0", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u4"), doBody("r1", mint(t, "u4", "r1"), "0")}
		}, 400, "BAD_REQUEST"},
		{"quantity -1", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u4"), doBody("r1", mint(t, "u4", "r1"), "-1")}
		}, 400, "BAD_REQUEST"},
		{"quantity 1.5", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u4"), doBody("r1", mint(t, "u4", "r1"), "1.5")}
		}, 400, "BAD_REQUEST"},
		{`quantity "2"`, func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u4"), doBody("r1", mint(t, "u4", "r1"), `"2"`)}
		}, 400, "BAD_REQUEST"},
		{"quantity above limit", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u4"), doBody("r1", mint(t, "u4", "r1"), "3")}
		}, 409, "LIMIT_REACHED"},
		{"non-JSON body", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u5"), []byte(`productId=r1&token=x`)}
		}, 400, "BAD_REQUEST"},
		{"empty body", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u5"), []byte{}}
		}, 400, "BAD_REQUEST"},
		{"oversized body", func(t *testing.T) call {
			tok := mint(t, "u5", "r1")
			return call{"POST", "/api/seckill/do", j.get("u5"),
				[]byte(`{"productId":"r1","token":"` + tok + `","quantity":1,"pad":"` + strings.Repeat("x", 8192) + `"}`)}
		}, 413, "TOO_LARGE"},
		{"missing token", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u5"), []byte(`{"productId":"r1","quantity":1}`)}
		}, 400, "BAD_REQUEST"},
		{"missing productId", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u5"), []byte(`{"token":"` + mint(t, "u5", "r1") + `","quantity":1}`)}
		}, 400, "BAD_REQUEST"},
		{"missing productId (token)", func(t *testing.T) call {
			return call{"POST", "/api/seckill/token", j.get("u5"), []byte(`{}`)}
		}, 400, "BAD_REQUEST"},
		{"wrong method (GET do)", func(t *testing.T) call {
			return call{"GET", "/api/seckill/do?productId=r1", j.get("u6"), nil}
		}, 405, ""},
		{"wrong method (PUT token)", func(t *testing.T) call {
			return call{"PUT", "/api/seckill/token", j.get("u6"), []byte(`{"productId":"r1"}`)}
		}, 405, ""},
		{"not started (token)", func(t *testing.T) call {
			return call{"POST", "/api/seckill/token", j.get("u7"), []byte(`{"productId":"soon"}`)}
		}, 403, "NOT_STARTED"},
		{"not started (do)", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u7"), doBody("soon", mint(t, "u7", "r1"), "1")}
		}, 403, "NOT_STARTED"},
		{"ended (token)", func(t *testing.T) call {
			return call{"POST", "/api/seckill/token", j.get("u7"), []byte(`{"productId":"past"}`)}
		}, 403, "ENDED"},
		{"ended (do)", func(t *testing.T) call {
			return call{"POST", "/api/seckill/do", j.get("u7"), doBody("past", mint(t, "u7", "r1"), "1")}
		}, 403, "ENDED"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.prep(t)
			stock0, outbox0 := map[string]int64{}, map[string]int64{}
			for _, p := range products {
				stock0[p], outbox0[p] = rd.stock(p), rd.orderCount(p)
			}
			res := e.must(req.method, req.path, req.jwt, req.body)
			if res.status != c.status || (c.code != "" && res.code() != c.code) {
				t.Errorf("got %v, want %d %s", res, c.status, c.code)
			}
			if !json.Valid(res.body) || res.code() == "" || jsonStr(res.body, "message") == "" {
				t.Errorf("answer is not {code, message}: %s", res.body)
			}
			for _, p := range products {
				if s, n := rd.stock(p), rd.orderCount(p); s != stock0[p] || n != outbox0[p] {
					t.Errorf("%s: stock %d -> %d, outbox %d -> %d; a rejected call must change nothing", p, stock0[p], s, outbox0[p], n)
				}
			}
		})
	}

	// A token whose do was refused before the deduction is not used up.
	t.Run("refused token is not burnt", func(t *testing.T) {
		tok := mint(t, "keeper", "r1")
		jwt := j.get("keeper")
		for _, c := range []struct {
			body   []byte
			status int
		}{
			{doBody("r1", tok, "0"), 400},
			{doBody("r1", tok, "1.5"), 400},
			{doBody("r1", tok, "3"), 409},
			{doBody("r2", tok, "1"), 403},
			{[]byte(`{"productId":"r1","token":"` + tok + `","quantity":1,"pad":"` + strings.Repeat("x", 8192) + `"}`), 413},
		} {
			if res := e.must("POST", "/api/seckill/do", jwt, c.body); res.status != c.status {
				t.Errorf("refused do: %v, want %d", res, c.status)
			}
		}
		if res := e.must("POST", "/api/seckill/do", j.get("someone-else"), doBody("r1", tok, "1")); res.status != 403 {
			t.Errorf("someone else's do with the token: %v, want 403", res)
		}
		before := rd.stock("r1")
		res, _ := e.buy(jwt, "r1", tok, 2)
		if res.status != 200 || jsonStr(res.body, "status") != "pending" {
			t.Fatalf("the token after refused calls: %v, want 200 pending", res)
		}
		if s := rd.stock("r1"); s != before-2 {
			t.Errorf("stock %d -> %d, want -2", before, s)
		}
	})
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
