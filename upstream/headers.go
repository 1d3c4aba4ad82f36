package upstream

import (
	"net/netip"

	"github.com/valyala/fasthttp"
)

// hopByHop are the headers meant for one connection only (RFC 9110 §7.6.1,
// plus the non-standard Keep-Alive and Proxy-Connection): a proxy must not
// pass them on, in either direction.
var hopByHop = [...]string{
	fasthttp.HeaderConnection,
	fasthttp.HeaderKeepAlive,
	"Proxy-Connection",
	fasthttp.HeaderProxyAuthenticate,
	fasthttp.HeaderProxyAuthorization,
	fasthttp.HeaderTE,
	fasthttp.HeaderTrailer,
	fasthttp.HeaderTransferEncoding,
	fasthttp.HeaderUpgrade,
}

// headers is what stripHopByHop needs from a request or response header.
type headers interface {
	PeekAll(key string) [][]byte
	Del(key string)
	DelBytes(key []byte)
}

// stripHopByHop removes the hop-by-hop headers and every header the
// Connection header names. scratch holds a copy of the Connection values
// (deleting would otherwise move the bytes under us); it is returned for reuse.
// Framing is not lost: fasthttp writes Content-Length for buffered bodies.
func stripHopByHop[H headers](h H, scratch []byte) []byte {
	scratch = scratch[:0]
	for _, v := range h.PeekAll(fasthttp.HeaderConnection) {
		scratch = append(scratch, v...)
		scratch = append(scratch, ',')
	}
	for rest := scratch; len(rest) > 0; {
		var tok []byte
		tok, rest = nextToken(rest)
		// "Connection: Host" would unroute the request; Host is end-to-end.
		if len(tok) == 0 || equalFold(tok, "host") {
			continue
		}
		h.DelBytes(tok)
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
	return scratch
}

// nextToken splits a comma-separated list, trimming optional whitespace.
func nextToken(b []byte) (tok, rest []byte) {
	i := 0
	for i < len(b) && b[i] != ',' {
		i++
	}
	tok, rest = b[:i], b[min(i+1, len(b)):]
	for len(tok) > 0 && (tok[0] == ' ' || tok[0] == '\t') {
		tok = tok[1:]
	}
	for len(tok) > 0 && (tok[len(tok)-1] == ' ' || tok[len(tok)-1] == '\t') {
		tok = tok[:len(tok)-1]
	}
	return tok, rest
}

// equalFold compares ASCII case-insensitively; lower must be lower case.
func equalFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

const (
	headerXForwardedFor   = "X-Forwarded-For"
	headerXRealIP         = "X-Real-IP"
	headerXForwardedProto = "X-Forwarded-Proto"
)

// prepare fills out with the request for the origin. The body is referenced,
// not copied: out lives only while Serve runs on the handler's goroutine,
// which is also why ctx's slices never outlive the handler.
func prepare(out *fasthttp.Request, ctx *fasthttp.RequestCtx, clientIP netip.Addr, buf []byte) []byte {
	ctx.Request.Header.CopyTo(&out.Header)
	out.SetBodyRaw(ctx.Request.Body())
	// Keep the Host the client sent (the URI's host would be lower-cased
	// and, for absolute-form requests, not the Host header at all).
	out.UseHostHeader = true
	// The origin is plain HTTP whatever the client used; an absolute
	// https:// request-target would otherwise make fasthttp refuse it.
	out.URI().SetScheme("http")
	out.Header.SetProtocol("HTTP/1.1")
	out.Header.SetNoDefaultContentType(true)

	buf = stripHopByHop(&out.Header, buf)
	// The edge already answered any 100-continue and read the body; asking
	// the origin again would only cost it an interim response.
	out.Header.Del(fasthttp.HeaderExpect)

	// X-Forwarded-For: what came in (all copies, as nginx joins them) plus
	// the peer we got it from ($proxy_add_x_forwarded_for). Stripping ran
	// first so "Connection: X-Forwarded-For" cannot drop what we set.
	buf = buf[:0]
	for _, v := range out.Header.PeekAll(headerXForwardedFor) {
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
		buf = append(buf, v...)
	}
	if len(buf) > 0 {
		buf = append(buf, ", "...)
	}
	peer, _ := netip.AddrFromSlice(ctx.RemoteIP())
	peer = peer.Unmap()
	buf = peer.AppendTo(buf)
	out.Header.Del(headerXForwardedFor)
	out.Header.SetBytesV(headerXForwardedFor, buf)

	real := clientIP
	if !real.IsValid() {
		real = peer
	}
	mark := len(buf)
	buf = real.Unmap().AppendTo(buf)
	out.Header.SetBytesV(headerXRealIP, buf[mark:])

	if ctx.IsTLS() {
		out.Header.Set(headerXForwardedProto, "https")
	} else {
		out.Header.Set(headerXForwardedProto, "http")
	}
	return buf
}
