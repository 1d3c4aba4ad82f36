package sale

import (
	"context"

	"github.com/valyala/fasthttp"

	"flashgate/sale/api"
)

// events serves GET /api/seckill/events?orderId=&productId=: the order's
// state at once, then its outcome, as Server-Sent Events (package push),
// to the signed-in owner of the order only; anyone else gets the same 404
// as for an order that does not exist.
//
// The stream is reserved before the order is read, so a flood of stream
// requests meets the limits (429) before it costs a Redis call, and an
// outcome published while the order is being read is not missed. Unlike
// result, there is no fallback to the order store: an order whose Redis
// state is gone was decided long ago (or Redis lost its memory), the page
// then polls /api/seckill/result, which asks the store — a flood of
// streams for unknown orders must not become a flood of store queries.
func (s *Service) events(r *api.Call) {
	ctx := r.Ctx
	if s.d.Events == nil {
		api.NoEvents.Write(ctx)
		return
	}
	if !ctx.IsGet() {
		api.MethodNotAllowed.Write(ctx)
		return
	}
	if rej := r.CheckSignedIn(); rej != nil {
		rej.Write(ctx)
		return
	}
	st, rej := s.d.Events.Open(r.ProductID, r.OrderID, r.UserID)
	if rej != nil {
		rej.Write(ctx)
		if rej.Status == fasthttp.StatusTooManyRequests {
			ctx.Response.Header.SetBytesKV(headerRetryAfter, retryAfterOne)
		}
		return
	}
	o, ok, verified, err := s.d.Store.ResultState(context.Background(), view(r.ProductID), r.OrderID, s.runIDFence(r))
	if err != nil {
		st.Abort()
		api.Busy.Write(ctx)
		return
	}
	if !ok || o.UserID != string(r.UserID) {
		st.Abort()
		api.UnknownOrder.Write(ctx)
		return
	}
	if !verified {
		// Redis may hold an older state than the shopper was shown (see
		// result): the stream starts once the sale is rebuilt; the page
		// polls result meanwhile.
		st.Abort()
		api.Recovering.Write(ctx)
		return
	}
	st.Serve(ctx, o)
}

var (
	headerRetryAfter = []byte(fasthttp.HeaderRetryAfter)
	retryAfterOne    = []byte("1")
)
