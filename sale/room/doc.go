// Package waitroom is a sale's waiting room: the shoppers who want to buy
// join a queue, and are let in at a rate the operator sets, the same on
// every edge without a coordinator.
//
// What it holds, each once:
//   - Room, a sale's waiting-room settings built from conf (Build);
//   - the signed ticket (Tickets): bound to the shopper and the sale,
//     carrying the ticket id and, once known, the place in the queue, so an
//     edge can refuse a shopper far from their turn from memory;
//   - the lottery (Rank): who joined before the opening is ranked by
//     HMAC-SHA256(key, ticket id) under a key drawn when the pre-queue opens,
//     committed to by its SHA-256 from then and revealed at the opening, so
//     anyone can recompute the order afterwards and nobody could pick it;
//   - the admission arithmetic (State.Frontier, ETA): N(t), the highest
//     place let in, from the state every edge reads in Redis;
//   - the proof-of-work challenge asked at joining (challenge.go).
//
// Redis keeps the queue (orders/stock/waitroom.go, one script per call);
// package sale answers the shopper API with it.
package room
