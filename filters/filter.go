package filters

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"gopkg.in/yaml.v3"

	"flashgate/conf/field"
	"flashgate/orders/stock"
	"flashgate/sale/api"
	"flashgate/sale/catalog"
	"flashgate/sale/ptoken"
	"flashgate/sale/session"
)

// Request is a Call on its way through the chain: the shopper API's
// per-request state, plus the chain's own bookkeeping. The proxy owns it
// (pooled) and resets it between requests; filters must not keep it, or any
// byte slice of Ctx, after Handle returns. The sale handlers get &r.Call.
type Request struct {
	api.Call

	// finishers holds filters that took something (a connection slot) and must
	// give it back when the request completes, in reverse order.
	finishers  [maxFinishers]Finisher
	nfinishers int
}

const maxFinishers = 8

// Reset prepares r for reuse.
func (r *Request) Reset() {
	r.Call.Reset()
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

// Verdict is what a filter decides. The zero value means "continue".
type Verdict struct {
	Reject *api.Rejection
	// RetryAfter, when > 0 on a rejection, becomes a Retry-After header (seconds).
	RetryAfter int
	// Delay, when > 0 on a pass, asks the runner to hold the request this long
	// before continuing (limit_req without nodelay).
	Delay time.Duration
}

// Pass is the "continue" verdict.
var Pass = Verdict{}

// Write answers with a rejecting verdict: the rejection plus Retry-After.
func (v Verdict) Write(ctx *fasthttp.RequestCtx) {
	v.Reject.Write(ctx)
	if v.RetryAfter > 0 {
		var buf [20]byte
		ctx.Response.Header.SetBytesV(fasthttp.HeaderRetryAfter, strconv.AppendInt(buf[:0], int64(v.RetryAfter), 10))
	}
}

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
	Sales    *catalog.Registry
	Sessions *session.Codec
	Tokens   *ptoken.Minter
	Bought   *catalog.BoughtCache

	// Stock is the edge's Redis store, for the limits with policy redis.
	// CheckOnly builds a chain only to check it (proxy -t): such filters
	// are then built without a store, and the chain must never run.
	Stock     *stock.Store
	CheckOnly bool

	// rateEdgeClock makes the Redis policy send the request's time to the
	// script instead of using Redis's clock: tests replay virtual time.
	rateEdgeClock bool
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
