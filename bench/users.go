package main

import (
	"fmt"
	"sync/atomic"
	"time"

	"flashgate/sale/ptoken"
	"flashgate/sale/session"
)

// Fixed secrets of the edge config bench writes: sessions bench signs and
// purchase tokens it mints are valid there.
const (
	benchSessionSecret = "bench-session-secret-0123456789abcdef"
	benchTokenSecret   = "bench-token-secret-0123456789abcdefgh"
)

// Users are the shopper ids u0000001.. with their session JWTs, signed the
// first time a shopper shows up and kept (a million sessions is ~200 MB
// signed; a run touches only the shoppers who arrive).
type Users struct {
	n      int
	codec  *session.Codec
	minter *ptoken.Minter
	jwt    []atomic.Pointer[string]
	signed atomic.Int64
}

func newUsers(n int, sessionSecret, tokenSecret string) (*Users, error) {
	codec, err := session.NewCodec([][]byte{[]byte(sessionSecret)}, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	u := &Users{n: n, codec: codec, jwt: make([]atomic.Pointer[string], n)}
	if tokenSecret != "" {
		if u.minter, err = ptoken.New([]byte(tokenSecret)); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// ID is the id of shopper i (0-based; wraps at n).
func (u *Users) ID(i int) string { return fmt.Sprintf("u%07d", i%u.n+1) }

// Session is shopper i's signed session.
func (u *Users) Session(i int) string {
	i %= u.n
	if p := u.jwt[i].Load(); p != nil {
		return *p
	}
	tok, err := u.codec.Sign(u.ID(i), time.Now())
	if err != nil {
		panic(err) // ids are ours and valid
	}
	u.jwt[i].Store(&tok)
	u.signed.Add(1)
	return tok
}

// Token mints a purchase token as the edge would (bench knows the edge's
// token secret): for steps that buy without asking for one first.
func (u *Users) Token(dst []byte, user, product string, ttl time.Duration) []byte {
	return u.minter.Mint(dst, []byte(user), []byte(product), time.Now().Add(ttl).UnixMilli())
}

// SignFresh signs shopper i's session without keeping it: for loads that
// see every shopper once.
func (u *Users) SignFresh(i int) string {
	tok, err := u.codec.Sign(u.ID(i), time.Now())
	if err != nil {
		panic(err)
	}
	return tok
}
