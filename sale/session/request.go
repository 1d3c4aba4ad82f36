package session

import "github.com/valyala/fasthttp"

// CookieName is the cookie that carries the session.
const CookieName = "session"

// FromRequest returns the session token of a request, or nil. It allocates
// nothing and the result aliases the request: do not keep it past the handler.
//
// An "Authorization: Bearer" header wins over the cookie. The header is set
// per request on purpose (API clients, the load tool, tests), while a cookie
// is ambient and may be stale; preferring the explicit one means a client
// can always say which identity it means. Any other Authorization scheme
// (say Basic, added by a corporate proxy) is not ours and is ignored, so the
// cookie is used.
func FromRequest(ctx *fasthttp.RequestCtx) []byte {
	if t := bearer(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)); t != nil {
		return t
	}
	if t := ctx.Request.Header.Cookie(CookieName); len(t) > 0 {
		return t
	}
	return nil
}

// bearer returns the credentials of a Bearer authorization (RFC 6750 §2.1;
// the scheme is case-insensitive per RFC 9110 §11.1), or nil.
func bearer(h []byte) []byte {
	const scheme = "bearer"
	if len(h) <= len(scheme) || h[len(scheme)] != ' ' {
		return nil
	}
	for i := 0; i < len(scheme); i++ {
		if h[i]|0x20 != scheme[i] {
			return nil
		}
	}
	t := h[len(scheme):]
	for len(t) > 0 && t[0] == ' ' {
		t = t[1:]
	}
	for len(t) > 0 && t[len(t)-1] == ' ' {
		t = t[:len(t)-1]
	}
	if len(t) == 0 {
		return nil
	}
	return t
}
