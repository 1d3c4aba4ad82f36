package filters

import (
	"net/netip"
	"time"

	"github.com/valyala/fasthttp"
	"gopkg.in/yaml.v3"

	"flashgate/conf/field"
	"flashgate/sale/activity"
	"flashgate/sale/ptoken"
	"flashgate/sale/session"
)

// Request is the per-request state the chain hands from filter to filter.
// The proxy owns it (pooled) and resets it between requests; filters must not
// keep it, or any byte slice of Ctx, after Handle returns.
type Request struct {
	Ctx *fasthttp.RequestCtx
	// ClientIP is the real client address resolved by RealIP before the chain runs.
	ClientIP netip.Addr
	// NowNano is the request's arrival time from the injectable clock, read once
	// per request so every filter agrees on it.
	NowNano int64

	// UserID and ProductID are filled by later filters (session, sale) and are
	// only valid for the lifetime of the request.
	UserID    []byte
	ProductID []byte

	// Sale API fields, parsed from the request before the chain runs (see
	// package sale) or filled by the sale filters.
	Endpoint Endpoint
	Qty      int
	Token    []byte
	OrderID  int64
	// Activity is the product's sale, found by sale_window.
	Activity activity.Entry
	// TokenNonce and TokenExpiresMs come from a verified purchase token.
	TokenNonce     [12]byte
	TokenExpiresMs int64

	// Scratch is a buffer handlers may use to build an answer; it keeps its
	// capacity across requests (the Request is pooled).
	Scratch []byte
	// userBuf owns the verified user id (UserID may instead be a view of a
	// request body, which must never be written through).
	userBuf []byte

	// finishers holds filters that took something (a connection slot) and must
	// give it back when the request completes, in reverse order.
	finishers  [maxFinishers]Finisher
	nfinishers int
}

const maxFinishers = 8

// Reset prepares r for reuse.
func (r *Request) Reset() {
	r.Ctx = nil
	r.ClientIP = netip.Addr{}
	r.NowNano = 0
	// The id and token fields may be views of the previous request's
	// buffers: drop them rather than keep (and later write into) that memory.
	r.UserID = nil
	r.ProductID = nil
	r.Endpoint = EndpointNone
	r.Qty = 0
	r.Token = nil
	r.OrderID = 0
	r.Activity = activity.Entry{}
	r.TokenNonce = [12]byte{}
	r.TokenExpiresMs = 0
	r.Scratch = r.Scratch[:0]
	for i := 0; i < r.nfinishers; i++ {
		r.finishers[i] = nil
	}
	r.nfinishers = 0
}

// Defer registers f to be finished when the request completes.
func (r *Request) Defer(f Finisher) bool {
	if r.nfinishers == maxFinishers {
		return false
	}
	r.finishers[r.nfinishers] = f
	r.nfinishers++
	return true
}

// Finish runs the registered finishers in reverse order. The proxy calls it
// once the response is written (or the request is abandoned).
func (r *Request) Finish() {
	for i := r.nfinishers - 1; i >= 0; i-- {
		r.finishers[i].Finish(r)
		r.finishers[i] = nil
	}
	r.nfinishers = 0
}

// Endpoint is the sale API call a request is for.
type Endpoint uint8

const (
	EndpointNone   Endpoint = iota // not the sale API
	EndpointStatus                 // GET /api/seckill/status
	EndpointLogin                  // POST /api/login
	EndpointToken                  // POST /api/seckill/token
	EndpointDo                     // POST /api/seckill/do
	EndpointResult                 // GET /api/seckill/result
	EndpointEvents                 // GET /api/seckill/events
)

// NeedsUser reports whether the endpoint needs a signed-in shopper.
func (e Endpoint) NeedsUser() bool { return e >= EndpointToken }

// Buys reports whether the endpoint is part of a purchase (token or do),
// the calls the sale filters guard.
func (e Endpoint) Buys() bool { return e == EndpointToken || e == EndpointDo }

// Rejection is a precompiled refusal: status, machine code and a short human
// message. Body is rendered once at build time so rejecting allocates nothing.
type Rejection struct {
	Status  int
	Code    string
	Message string
	Body    []byte
}

// NewRejection renders the JSON error body of the shopper API contract.
func NewRejection(status int, code, message string) *Rejection {
	return &Rejection{Status: status, Code: code, Message: message, Body: ErrorBody(code, message)}
}

// Verdict is what a filter decides. The zero value means "continue".
type Verdict struct {
	Reject *Rejection
	// RetryAfter, when > 0 on a rejection, becomes a Retry-After header (seconds).
	RetryAfter int
	// Delay, when > 0 on a pass, asks the runner to hold the request this long
	// before continuing (limit_req without nodelay).
	Delay time.Duration
}

// Pass is the "continue" verdict.
var Pass = Verdict{}

// Filter is one stage of the chain.
type Filter interface {
	Handle(r *Request) Verdict
}

// Finisher is implemented by filters that must release something after the
// request (conn_limit's slot).
type Finisher interface {
	Finish(r *Request)
}

// Spec is the part of a filter's YAML that every filter shares. Params holds
// the whole mapping so the filter's constructor can decode its own fields.
type Spec struct {
	Type    string
	Name    string
	Enabled bool
	DryRun  bool
	Params  *yaml.Node
}

// Env is what constructors may use besides their own settings: the clock and
// the state that must survive a reload.
type Env struct {
	Now   func() int64 // unix nanoseconds
	Zones *Zones

	// For the sale filters; nil when the edge runs without a sale.
	Activities *activity.Registry
	Sessions   *session.Codec
	Tokens     *ptoken.Minter
	Bought     *activity.BoughtCache
}

// Constructor builds a filter from its spec. Errors name fields relative to
// the filter's mapping (e.g. "rate").
type Constructor func(spec Spec, env *Env) (Filter, field.Errors)

var registry = map[string]Constructor{}

// Register adds a filter type. Called from init functions of filter files.
func Register(typ string, c Constructor) {
	if _, dup := registry[typ]; dup {
		panic("filters: duplicate type " + typ)
	}
	registry[typ] = c
}

// Lookup returns the constructor of a filter type.
func Lookup(typ string) (Constructor, bool) {
	c, ok := registry[typ]
	return c, ok
}

// Types lists the registered filter types (for error messages).
func Types() []string {
	out := make([]string, 0, len(registry))
	for t := range registry {
		out = append(out, t)
	}
	return out
}
