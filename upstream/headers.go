package upstream

import (
	"bytes"
	"math/bits"
	"net/netip"

	"github.com/valyala/fasthttp"
)

// The headers Serve removes or rewrites, one bit each. The first nine are
// hop-by-hop (RFC 9110 §7.6.1, plus the non-standard Keep-Alive and
// Proxy-Connection): a proxy must not pass them on, in either direction.
// Expect and X-Forwarded-For are request headers prepare rewrites; knowing
// they are absent saves a scan of the headers each.
const (
	hConnection = 1 << iota
	hKeepAlive
	hProxyConnection
	hProxyAuthenticate
	hProxyAuthorization
	hTE
	hTrailer
	hTransferEncoding
	hUpgrade
	hExpect
	hXForwardedFor

	hopMask    = hExpect - 1           // the hop-by-hop ones
	allHeaders = hXForwardedFor<<1 - 1 // presence unknown: treat all as present
)

// hopByHop names the hop-by-hop bits, by bit position.
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

var _ [1]struct{} = [hopMask >> (len(hopByHop) - 1)]struct{}{} // one name per hop-by-hop bit

// headerBit returns the bit of the header named key (any case), 0 for
// headers Serve leaves alone. Only whole names match: "TE" is not
// "TEST-Header", "Upgrade" is not "Upgrade-Insecure-Requests".
func headerBit(key []byte) uint16 {
	switch len(key) {
	case 2:
		if equalFold(key, "te") {
			return hTE
		}
	case 6:
		if equalFold(key, "expect") {
			return hExpect
		}
	case 7:
		switch {
		case equalFold(key, "upgrade"):
			return hUpgrade
		case equalFold(key, "trailer"):
			return hTrailer
		}
	case 10:
		switch {
		case equalFold(key, "connection"):
			return hConnection
		case equalFold(key, "keep-alive"):
			return hKeepAlive
		}
	case 15:
		if equalFold(key, "x-forwarded-for") {
			return hXForwardedFor
		}
	case 16:
		if equalFold(key, "proxy-connection") {
			return hProxyConnection
		}
	case 17:
		if equalFold(key, "transfer-encoding") {
			return hTransferEncoding
		}
	case 18:
		if equalFold(key, "proxy-authenticate") {
			return hProxyAuthenticate
		}
	case 19:
		if equalFold(key, "proxy-authorization") {
			return hProxyAuthorization
		}
	}
	return 0
}

// scanRaw returns the bits of the headers named in a raw header block (the
// wire bytes after the request line, as RequestHeader.RawHeaders keeps
// them), in one pass. Continuation lines (obs-fold: starting with a space or
// tab) belong to the header before them and name nothing; the blank line
// ends the block.
func scanRaw(raw []byte) uint16 {
	var present uint16
	i, n := 0, len(raw)
	for i < n {
		switch raw[i] {
		case '\r', '\n':
			return present
		case ' ', '\t':
		case 'c', 'C', 'e', 'E', 'k', 'K', 'p', 'P', 't', 'T', 'u', 'U', 'x', 'X':
			// The first letter of a name headerBit knows. Names are
			// short: a plain loop beats IndexByte's call.
			start := i
			for i < n && raw[i] != ':' {
				i++
			}
			present |= headerBit(raw[start:i])
		}
		// Values can be long (cookies, user agents): IndexByte.
		nl := bytes.IndexByte(raw[i:], '\n')
		if nl < 0 {
			break
		}
		i += nl + 1
	}
	return present
}

// requestPresent is the set of headers that may be present in h (a request
// the edge server parsed, or a copy of one), from one scan of its raw header
// block. Set bits are a superset of what h holds, which is all stripping
// needs: deleting an absent header changes nothing. It relies on the parsed
// headers matching the wire, so a header added to the request in code after
// parsing is not seen (nothing in the edge does so before Serve). Without a
// raw block (a request built in code), or with trailers (fields outside the
// header block), every bit is set.
func requestPresent(h *fasthttp.RequestHeader) uint16 {
	raw := h.RawHeaders()
	if len(raw) == 0 || len(h.PeekTrailerKeys()) > 0 {
		return allHeaders
	}
	present := scanRaw(raw)
	if h.ConnectionClose() {
		// Set without a Connection field (HTTP/1.0, or a close the
		// parser folded into the flag): deleting Connection clears it.
		present |= hConnection
	}
	return present
}

// responsePresent is the set of hop-by-hop headers in h, from one pass over
// its fields. ResponseHeader.All has no side effect that matters here (it
// materialises the default Server value, as Del(Trailer) always did) and
// yields Connection when only the close flag is set. With trailers All would
// allocate, and they live outside the header fields: every bit is set.
func responsePresent(h *fasthttp.ResponseHeader) uint16 {
	if len(h.PeekTrailerKeys()) > 0 {
		return allHeaders
	}
	var present uint16
	for k := range h.All() {
		present |= headerBit(k)
	}
	return present
}

// headers is what stripHopByHop needs from a request or response header.
type headers interface {
	PeekAll(key string) [][]byte
	Del(key string)
	DelBytes(key []byte)
}

// stripHopByHop removes the hop-by-hop headers and every header the
// Connection header names. present says which of them may be there
// (requestPresent, responsePresent, or allHeaders); the others are not
// searched for. scratch holds a copy of the Connection values (deleting
// would otherwise move the bytes under us); it is returned for reuse.
// Framing is not lost: fasthttp writes Content-Length for buffered bodies.
func stripHopByHop[H headers](h H, present uint16, scratch []byte) []byte {
	scratch = scratch[:0]
	if present&hConnection != 0 {
		for _, v := range h.PeekAll(fasthttp.HeaderConnection) {
			scratch = append(scratch, v...)
			scratch = append(scratch, ',')
		}
	}
	for rest := scratch; len(rest) > 0; {
		var tok []byte
		tok, rest = nextToken(rest)
		// "Connection: Host" would unroute the request; Host is end-to-end.
		// A hop-by-hop name is deleted below if present (and has no
		// effect if absent).
		if len(tok) == 0 || equalFold(tok, "host") || headerBit(tok)&hopMask != 0 {
			continue
		}
		h.DelBytes(tok)
	}
	for m := present & hopMask; m != 0; m &= m - 1 {
		h.Del(hopByHop[bits.TrailingZeros16(m)])
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
	copyRequest(out, ctx)
	// One scan of the raw header block finds which of the headers
	// rewriteHeaders handles are there; the absent ones are not searched for.
	return rewriteHeaders(out, ctx, clientIP, requestPresent(&out.Header), buf)
}

func copyRequest(out *fasthttp.Request, ctx *fasthttp.RequestCtx) {
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
}

// rewriteHeaders strips the hop-by-hop headers and Expect and sets the
// forwarding headers; present is requestPresent's answer, or allHeaders.
func rewriteHeaders(out *fasthttp.Request, ctx *fasthttp.RequestCtx, clientIP netip.Addr, present uint16, buf []byte) []byte {
	buf = stripHopByHop(&out.Header, present, buf)
	// The edge already answered any 100-continue and read the body; asking
	// the origin again would only cost it an interim response.
	if present&hExpect != 0 {
		out.Header.Del(fasthttp.HeaderExpect)
	}

	// X-Forwarded-For: what came in (all copies, as nginx joins them) plus
	// the peer we got it from ($proxy_add_x_forwarded_for). Stripping ran
	// first so "Connection: X-Forwarded-For" cannot drop what we set.
	buf = buf[:0]
	if present&hXForwardedFor != 0 {
		for _, v := range out.Header.PeekAll(headerXForwardedFor) {
			if len(buf) > 0 {
				buf = append(buf, ", "...)
			}
			buf = append(buf, v...)
		}
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
		out.Header.Del(headerXForwardedFor)
	}
	peer, _ := netip.AddrFromSlice(ctx.RemoteIP())
	peer = peer.Unmap()
	buf = peer.AppendTo(buf)
	out.Header.SetBytesV(headerXForwardedFor, buf)

	real := clientIP
	if !real.IsValid() {
		real = peer
	}
	mark := len(buf)
	buf = real.Unmap().AppendTo(buf)
	// Set replaces only the first copy: a client sending the header twice
	// would get its second copy through to the origin. Delete every copy.
	out.Header.Del(headerXRealIP)
	out.Header.SetBytesV(headerXRealIP, buf[mark:])

	out.Header.Del(headerXForwardedProto)
	if ctx.IsTLS() {
		out.Header.Set(headerXForwardedProto, "https")
	} else {
		out.Header.Set(headerXForwardedProto, "http")
	}
	return buf
}
