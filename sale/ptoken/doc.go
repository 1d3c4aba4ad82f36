// Package ptoken mints and checks one-time purchase tokens.
//
// A shopper asks for a token (POST /api/seckill/token) while a sale is active
// and must present it to buy (POST /api/seckill/do). The token is bound to the
// user, the product and an expiry by an HMAC-SHA256 tag, so an edge can check
// it without shared state, and a bot cannot buy without first going through
// the token endpoint (and its limits) for that very user and product.
//
// The signed form is an Envelope (envelope.go), which the waiting room's
// queue tickets use too with their own payload and secret. A purchase
// token's layout, base64url without padding (TokenLen = 50 characters):
//
//	version (1) | nonce (12) | expiresMs (8, big-endian) | tag (16)
//	tag = HMAC-SHA256(secret, version | nonce | expiresMs |
//	                          len(user) | user | len(product) | product)[:16]
//
// with the lengths as 4-byte big-endian integers, so that no two (user,
// product) pairs feed the MAC the same bytes. User and product are not in the
// token: the checker supplies them from the verified session and the request,
// and a token minted for anyone or anything else fails as ErrForged. A 128-bit
// tag is plenty for a token that lives seconds to minutes (RFC 2104 §5).
//
// # One-time use: the contract with the Redis script
//
// This package is stateless: Check alone accepts a token any number of times
// until it expires. What makes a token single-use is its nonce. The stock
// deduction script, in the same round trip as the deduction, marks the
// nonce used — a field of the product's used-token hash of the token's
// expiry time to 10 s, sk:{<product>}:tk:<expiresMs/10000>, or, for a sale of the
// older per-key layout, the key sk:{<product>}:t:<NonceHex(nonce)> — and
// refuses the purchase (BAD_TOKEN) when it is marked already. The keys share
// the product's hash tag, so it works on Redis Cluster, and a mark must live
// at least until the token expires, otherwise a replay after the mark's
// expiry would be accepted again; that is why Check returns expiresMs (the
// hash lives until its 10 s end). A purchase refused before the script
// (sold out locally, rate-limited) does not consume the token, nor does one
// the script refuses (sold out, limit reached); a successful one does.
//
// Nonces are 96 bits from crypto/rand, so two tokens never share one in
// practice (birthday bound ~2^48 tokens), across all edges, without
// coordination.
package ptoken
