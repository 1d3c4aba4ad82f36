// Package reconcile proves the sale's promises after a test, a bench run or
// an incident: it compares what Redis says left stock with what the order
// ledger (orderstore) holds, per product, and prints
//
//	RECONCILE products=N oversold=X lost=Y duplicated=Z
//
// as its last line. Any non-zero total is an error (the CLI exits non-zero),
// and so is a product the ledger has rows for that has no stock key in
// Redis.
//
// Definitions, all in units, per product. From Redis (sk:{p}:meta and
// sk:{p}:stock): I initial, R restocked, Rm released (by a cancel or the
// pay deadline), Pm paid, Em expired (the part of Rm the deadline gave
// back), Rem remaining, L the per-user limit. From the ledger after FINAL,
// by status: U unpaid (0), Pd paid (1), C cancelled and E expired (2), the
// units held S = U + Pd and released X = C + E, the largest number of held
// units one user has (maxUser), and the order ids with more than one row
// (dupRows, 0 unless the table is broken). P pending: units of order events
// published-to-be but not stored — by default the outbox entries
// (sk:{p}:outbox) of orders that have no row yet; events in Kafka that the
// consumer group has not stored are waited out first (see WithDrain), since
// they cannot be attributed to a product without reading them.
//
//	deducted D = I + R + Rm − Rem   units the Lua script ever took from stock
//	net      N = D − Rm = I + R − Rem  units sold and not given back
//	F          = max(0, Rm − X)     releases Redis made whose event is not stored
//	G          = max(0, Em − E) + max(0, (Rm − Em) − C) + max(0, Pm − Pd)
//	                                settlements Redis made that the ledger lacks,
//	                                per kind (an expiry stored as a cancel shows)
//	held       = S + P − F          units the ledger says shoppers hold
//
//	oversold   = max(0, −Rem) + max(0, held − (I + R)) + max(0, maxUser − L)
//	lost       = max(0, N − held) + max(F, G)
//	duplicated = dupRows + max(0, held − N) + max(0, X − Rm)
//
// Drained and clean, that is I + R = Pd + U + Rem (every unit is paid,
// unpaid or still for sale) and Rm = C + E, Em = E, Pm = Pd (every
// settlement Redis made is in the ledger, with its reason). Rows written
// before pay deadlines carry status 1 (final once stored) while Redis
// counted no payment for them, so Pd above Pm is not an error. A paid or
// release event still in the outbox counts as lost until the relay sent
// it: WithSettle waits for that.
//
// oversold: the stock key went negative, shoppers hold more than ever
// existed, or a buyer holds more than the limit. lost: units that left
// stock and are neither stored nor pending, or a release that never reached
// the ledger. duplicated: an order counted twice, or stored units that Redis
// never deducted (e.g. a sale reopened without the ledger after Redis lost
// its memory).
//
// lost and F are only meaningful once the pipeline drained: an event in
// flight looks lost. Run therefore takes WithDrain (wait until the consumer
// group's lag is 0, e.g. consumer.(*Consumer).Drained or
// consumer.WaitDrained) and WithSettle (re-check until clean or a deadline,
// for pipelines whose outbox sweeper is still working). A product whose
// sale is not warmed in Redis cannot be checked against Redis: it is
// reported, and when the ledger has rows for it (Redis lost the sale and
// nothing rebuilt it) it is an error of its own, with an ERROR line naming
// the product — the totals line stays as it is.
package reconcile
