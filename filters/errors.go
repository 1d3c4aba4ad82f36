package filters

import (
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"
)

// ErrorBody renders {"code": ..., "message": ...}. Used at build time only.
func ErrorBody(code, message string) []byte {
	b, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, message})
	return b
}

var contentJSON = []byte("application/json")

// Write answers the request with the rejection: its status, the JSON body
// rendered at build time, and no caching. It allocates nothing.
func (rej *Rejection) Write(ctx *fasthttp.RequestCtx) {
	ctx.Response.Reset()
	ctx.SetStatusCode(rej.Status)
	ctx.Response.Header.SetContentTypeBytes(contentJSON)
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	ctx.SetBody(rej.Body)
}

// Write answers with a rejecting verdict: the rejection plus Retry-After.
func (v Verdict) Write(ctx *fasthttp.RequestCtx) {
	v.Reject.Write(ctx)
	if v.RetryAfter > 0 {
		var buf [20]byte
		ctx.Response.Header.SetBytesV(fasthttp.HeaderRetryAfter, strconv.AppendInt(buf[:0], int64(v.RetryAfter), 10))
	}
}
