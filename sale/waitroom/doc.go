// Package waitroom is the sale's waiting room at the edge.
//
// challenge.go is its bot friction: the proof-of-work challenge a shopper's
// browser solves before joining a queue, issued and verified by the edge
// with one hash and one HMAC, without state.
package waitroom
