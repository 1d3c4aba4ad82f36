package proxy

import (
	"strconv"

	"github.com/valyala/fasthttp"

	"flashgate/filters"
)

// Precompiled error bodies: answering an error allocates nothing.
var (
	errNotFound        = filters.NewRejection(404, "NOT_FOUND", "not found")
	errTooLarge        = filters.NewRejection(413, "TOO_LARGE", "request body too large")
	errHeadersTooLarge = filters.NewRejection(431, "BAD_REQUEST", "request headers too large")
	errBadRequest      = filters.NewRejection(400, "BAD_REQUEST", "malformed request")
	errTimeout         = filters.NewRejection(408, "BAD_REQUEST", "request not received in time")
	errUnauthorized    = filters.NewRejection(401, "UNAUTHENTICATED", "admin token required")
	errMethod          = filters.NewRejection(405, "BAD_REQUEST", "method not allowed")
)

var contentJSON = []byte("application/json")

func writeError(ctx *fasthttp.RequestCtx, status int, rej *filters.Rejection) {
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.Response.Header.SetContentTypeBytes(contentJSON)
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	ctx.SetBody(rej.Body)
}

func writeRejection(ctx *fasthttp.RequestCtx, v filters.Verdict) {
	writeError(ctx, v.Reject.Status, v.Reject)
	if v.RetryAfter > 0 {
		var buf [20]byte
		ctx.Response.Header.SetBytesV(fasthttp.HeaderRetryAfter, strconv.AppendInt(buf[:0], int64(v.RetryAfter), 10))
	}
}
