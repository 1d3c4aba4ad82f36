package api

import (
	"encoding/json"

	"github.com/valyala/fasthttp"
)

// Rejection is an error answer of the contract: status, machine code and a
// short human message. Body is rendered when the answer is defined, so
// writing it allocates nothing. Rejections are shared: never modify one.
type Rejection struct {
	Status  int
	Code    string
	Message string
	Body    []byte
}

// newRejection is for the catalogue only: every answer is defined there.
func newRejection(status int, code, message string) *Rejection {
	b, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, message})
	return &Rejection{Status: status, Code: code, Message: message, Body: b}
}

// WithStatus is the same answer under another status, for filters whose
// status is configurable. Call it when the filter is built, not per request.
func (rej *Rejection) WithStatus(status int) *Rejection {
	if status == rej.Status {
		return rej
	}
	c := *rej
	c.Status = status
	return &c
}

// WithMessage is the same status and code with the cause as the message. It
// allocates: for the operator API, whose answers say what went wrong.
func (rej *Rejection) WithMessage(message string) *Rejection {
	return newRejection(rej.Status, rej.Code, message)
}

// AppendOpen appends the body without its closing brace, for an answer
// that carries more fields after the code and message.
func (rej *Rejection) AppendOpen(b []byte) []byte {
	return append(b, rej.Body[:len(rej.Body)-1]...)
}

// The header name is in fasthttp's normalized form, so SetCanonical can
// skip normalizing it for every answer.
var (
	contentJSON  = []byte("application/json")
	cacheControl = []byte(fasthttp.HeaderCacheControl)
	noStore      = []byte("no-store")
)

// Write answers the request with the rejection: its status, its body and no
// caching. It replaces anything already in the response, headers included.
// It allocates nothing.
func (rej *Rejection) Write(ctx *fasthttp.RequestCtx) {
	ctx.Response.Reset()
	WriteJSON(ctx, rej.Status, rej.Body)
}

// WriteJSON answers the request with a JSON body under status, not to be
// cached: the one writer of the edge's JSON answers (a rejection's, a
// rejection that carries more fields after AppendOpen, and every other).
// Unlike Write it keeps what the response holds already (a cookie). It
// allocates nothing.
func WriteJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.Response.Header.SetContentTypeBytes(contentJSON)
	ctx.Response.Header.SetCanonical(cacheControl, noStore)
	ctx.SetBody(body)
}
