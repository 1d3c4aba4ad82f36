// Package session verifies the signed shopper session at the edge.
//
// The session is a JWT (RFC 7519) in compact JWS form (RFC 7515) signed with
// HMAC-SHA256. It is checked on every sale API call, so verification is local
// (no Redis round trip) and allocation-free: HMAC states and decode buffers are
// pooled, and the two tiny JSON objects are parsed by hand. A Codec remembers
// the tokens it verified twice in a fixed table (8192 sessions, 3 MB): the
// same bytes again are answered from it, exp and nbf checked against the
// clock each time (cache.go says why that is exact).
//
// What Verify accepts is deliberately narrower than what RFC 7519 allows:
//
//   - the header's "alg" must be exactly "HS256" (no "none", no other
//     algorithm, never taken from anywhere else), and a "crit" header is
//     refused because no extension is understood;
//   - "sub" must be a plain JSON string of 1..64 bytes of [A-Za-z0-9_.@-];
//     a sub written with escapes is refused rather than decoded, so the id a
//     filter sees is byte-for-byte the id that was signed;
//   - "exp" is required; "nbf" is honoured when present; both are NumericDates
//     without exponent notation (a fraction rounds up, RFC 7519 allows one);
//   - keys written with escapes, duplicate "alg"/"sub"/"exp"/"nbf" and
//     trailing bytes are refused, so no two JSON readers can disagree about
//     what a token says;
//   - segments must be canonical base64url without padding, so one set of
//     claims has exactly one accepted spelling.
//
// Other claims ("iat", "iss", ...) are ignored.
//
// Keys rotate by listing several secrets: the first signs, all verify. Put
// the new secret second on every edge, then first once all edges have it,
// then drop the old one after the session TTL has passed.
//
// Every error is one of ErrMissing, ErrMalformed, ErrSignature, ErrExpired.
// All become 401 UNAUTHENTICATED for the client; the distinction is for logs.
package session
