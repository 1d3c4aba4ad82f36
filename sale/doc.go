// Package sale is the sale API of the edge: it parses the shopper's call
// (before the filter chain, so the filters see the product, user and
// token), answers status from memory, signs in demo shoppers, mints
// one-time purchase tokens, turns a purchase into one coalesced Redis
// script call (settling in the background those whose outcome Redis left
// unknown), and reads order results. It also keeps the edge's picture of
// the sales current: warm-up, a background refresh from Redis, the
// sold-out broadcast, the circuit breakers (one per product) and the
// degrade switch. A sale with a waiting room (room.go, decisions in
// sale/room) is bought through its queue: join, poll, the lottery's
// record, and the token call minting only for an admitted shopper.
package sale
