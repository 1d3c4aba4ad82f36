// Package push tells waiting shoppers how their order went, as Server-Sent
// Events, instead of having them poll /api/seckill/result.
//
// The publishing side is stock.Store.PublishStored (and PublishReleased):
// whoever runs the order consumer calls it after each stored batch, after
// MarkSuccess, so that the order state in Redis is already final when the
// message arrives. It sends one PUBLISH per product per batch on
// stock.ChangesChannel (on Redis Cluster one SPUBLISH on the product's own
// channel, stock.ChangesChannelOf, which lives on the node of its slot),
// carrying the batch's order ids as a sorted delta list (a few bytes per
// order).
//
// The receiving side is the Hub, one per edge process. It holds ONE Redis
// subscription however many shoppers wait (on a cluster one channel per
// product that a stream has waited for: the hub follows a product from its
// first served stream on), and a table of waiting streams keyed by order id
// (and product). A message for a batch looks its ids up, writes each
// waiting stream its outcome and closes it. Pub/sub is at most once: when a
// channel is (re)established — the edge may have missed messages while it
// was disconnected, while a failed master's replica was being promoted, or
// before it followed a new product — the hub reads the order state of every
// stream it holds and settles those that were decided meanwhile. A stream
// that reaches its deadline reads its order state once more and ends with
// it, so even a lost PUBLISH costs a shopper at most the deadline.
//
// Memory per stream is what the design is about: tens of thousands of
// shoppers wait at once during a sale. The sale handler hijacks the
// connection (fasthttp then releases its request context and buffers), the
// hub writes the response header itself and parks the bare net.Conn in a
// small Stream struct. No goroutine waits per stream: one ticker goroutine
// sends heartbeats and enforces deadlines for all of them, and outcomes are
// written by the goroutine that received the message. That needs the
// fasthttp.Server's KeepHijackedConns (Config.KeepHijackedConns says so);
// without it fasthttp closes a hijacked connection when its handler returns,
// so the handler has to wait, keeping a goroutine, the request context and
// the read buffer per stream (see BenchmarkStreamMemory for both figures).
//
// Writes never wait for a client. On Linux a write to a plain TCP connection
// is one non-blocking send: if the socket cannot take the event at once, the
// client has left kilobytes unread (a stream sends well under one kilobyte
// in its whole life) and is dropped. Other connections (TLS, fasthttp's
// per-IP wrapper) get Config.WriteTimeout per write. Either way one slow
// client cannot hold up anybody else's events for longer than that.
//
// Limits: Config.MaxStreams per edge and Config.MaxPerUser per shopper and
// edge (a local limit: with N edges a shopper can hold N times as many),
// both checked before any Redis call, so a flood of stream requests is
// refused with 429 instead of costing memory. A shopper at the limit whose
// older streams belong to pages that were closed (the peer sent FIN) gets
// those reclaimed first.
package push
