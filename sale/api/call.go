package api

import (
	"net/netip"

	"github.com/valyala/fasthttp"

	"flashgate/sale/catalog"
)

// Call is one shopper request as the filter chain and the sale handlers see
// it. The edge owns it (pooled) and resets it between requests; nothing may
// keep it, or any byte slice of Ctx, after the request is answered.
type Call struct {
	Ctx *fasthttp.RequestCtx
	// ClientIP is the real client address, resolved before the chain runs.
	ClientIP netip.Addr
	// NowNano is the request's arrival time from the injectable clock, read
	// once per request so every filter and handler agrees on it.
	NowNano int64

	// UserID and ProductID are filled by the parser and the session check;
	// they are only valid for the lifetime of the request.
	UserID    []byte
	ProductID []byte

	// The call's parameters, parsed before the chain runs (package sale) or
	// filled by the sale filters.
	Endpoint Endpoint
	Qty      int
	Token    []byte
	OrderID  int64
	// Activity is the product's sale, once found (sale_window or handler).
	Sale catalog.Entry
	// TokenNonce and TokenExpiresMs come from a verified purchase token.
	TokenNonce     [12]byte
	TokenExpiresMs int64
	// Checked is the purchase rules already decided for the call (rules.go).
	Checked Rules
	// The waiting room's: the proof of work of a join (Challenge, Nonce)
	// and the ticket the shopper holds (cookie or header), views of the
	// request.
	Challenge, Nonce, Ticket []byte

	// Scratch is a buffer handlers may build an answer in; it keeps its
	// capacity across requests.
	Scratch []byte
	// userBuf owns the verified user id (UserID may instead be a view of a
	// request body, which must never be written through).
	userBuf []byte
}

// Reset prepares c for the next request.
func (c *Call) Reset() {
	c.Ctx = nil
	c.ClientIP = netip.Addr{}
	c.NowNano = 0
	// The id and token fields may be views of the previous request's
	// buffers: drop them rather than keep (and later write into) that memory.
	c.UserID = nil
	c.ProductID = nil
	c.Endpoint = EndpointNone
	c.Qty = 0
	c.Token = nil
	c.OrderID = 0
	c.Sale = catalog.Entry{}
	c.TokenNonce = [12]byte{}
	c.TokenExpiresMs = 0
	c.Checked = 0
	c.Challenge, c.Nonce, c.Ticket = nil, nil, nil
	c.Scratch = c.Scratch[:0]
}

// UserBuf is the call's own buffer for a verified user id, emptied, to
// append the id to; SetUser then makes the result the call's user.
func (c *Call) UserBuf() []byte { return c.userBuf[:0] }

// SetUser makes id, built on UserBuf, the call's user, and keeps it as the
// buffer so its capacity serves the next request.
func (c *Call) SetUser(id []byte) { c.userBuf, c.UserID = id, id }

// Endpoint is the sale API call a request is for.
type Endpoint uint8

const (
	EndpointNone      Endpoint = iota // not the sale API
	EndpointStatus                    // GET /api/seckill/status
	EndpointLogin                     // POST /api/login
	EndpointLottery                   // GET /api/seckill/queue/lottery (public)
	EndpointToken                     // POST /api/seckill/token
	EndpointDo                        // POST /api/seckill/do
	EndpointResult                    // GET /api/seckill/result
	EndpointEvents                    // GET /api/seckill/events
	EndpointChallenge                 // GET /api/seckill/challenge
	EndpointJoin                      // POST /api/seckill/queue
	EndpointQueue                     // GET /api/seckill/queue
)

// NeedsUser reports whether the endpoint needs a signed-in shopper.
func (e Endpoint) NeedsUser() bool { return e >= EndpointToken }

// Buys reports whether the endpoint is part of a purchase (token or do),
// the calls the sale filters guard.
func (e Endpoint) Buys() bool { return e == EndpointToken || e == EndpointDo }
