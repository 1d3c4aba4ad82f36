package upstream

import (
	"bytes"
	"math/bits"
	"net/netip"

	"github.com/valyala/fasthttp"

	"flashgate/sale/api"
)

// The headers Serve removes or rewrites, one bit each. The first nine are
// hop-by-hop (RFC 9110 §7.6.1, plus the non-standard Keep-Alive and
// Proxy-Connection): a proxy must not pass them on, in either direction.
// Expect and the forwarding headers are request headers prepare removes or
// rewrites; knowing they are absent saves a scan of the headers each.
// hOddName is not a header: it says some name must be judged one by one
// (oddName), which only a request with such a name pays for.
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
	hXRealIP
	hXForwardedProto
	hXForwardedHost
	hXForwardedPort
	hForwarded
	hXForwardedScheme
	hXForwardedSsl
	hXForwardedProtocol
	hTraceparent
	hTracestate
	hOddName

	hopMask    = hExpect - 1     // the hop-by-hop ones
	allHeaders = hOddName<<1 - 1 // presence unknown: treat all as present

	// testimonyMask: what a proxy in front says about the request. The
	// edge keeps it only from a trusted proxy; anyone else's claim goes.
	testimonyMask = hXForwardedProto | hXForwardedHost | hXForwardedPort | hForwarded |
		hXForwardedScheme | hXForwardedSsl | hXForwardedProtocol
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

const (
	headerXForwardedFor   = "X-Forwarded-For"
	headerXRealIP         = "X-Real-IP"
	headerXForwardedProto = "X-Forwarded-Proto"
	headerXForwardedHost  = "X-Forwarded-Host"
	headerXForwardedPort  = "X-Forwarded-Port"
	headerForwarded       = "Forwarded"
	// The scheme as Rack (X-Forwarded-Scheme, X-Forwarded-Ssl: on) and
	// gunicorn's secure_scheme_headers (X-Forwarded-Protocol: ssl) read it.
	headerXForwardedScheme   = "X-Forwarded-Scheme"
	headerXForwardedSsl      = "X-Forwarded-Ssl"
	headerXForwardedProtocol = "X-Forwarded-Protocol"
)

// The forwarding headers the edge writes, spelled as fasthttp normalizes
// them (the edge server normalizes names), so SetCanonical can skip the
// normalizing copy Set makes of the name on every request.
var (
	keyXForwardedFor   = []byte("X-Forwarded-For")
	keyXRealIP         = []byte("X-Real-Ip")
	keyXForwardedProto = []byte("X-Forwarded-Proto")
	valueHTTP          = []byte("http")
	valueHTTPS         = []byte("https")
)

// testimony names the testimonyMask bits.
var testimony = [...]struct {
	bit  uint32
	name string
}{
	{hXForwardedProto, headerXForwardedProto},
	{hXForwardedHost, headerXForwardedHost},
	{hXForwardedPort, headerXForwardedPort},
	{hForwarded, headerForwarded},
	{hXForwardedScheme, headerXForwardedScheme},
	{hXForwardedSsl, headerXForwardedSsl},
	{hXForwardedProtocol, headerXForwardedProtocol},
}

// headerBit returns the bit of the header named key (any case), 0 for
// headers Serve leaves alone. Only whole names match: "TE" is not
// "TEST-Header", "Upgrade" is not "Upgrade-Insecure-Requests".
func headerBit(key []byte) uint32 {
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
	case 9:
		switch {
		case equalFold(key, "x-real-ip"):
			return hXRealIP
		case equalFold(key, "forwarded"):
			return hForwarded
		}
	case 10:
		switch {
		case equalFold(key, "connection"):
			return hConnection
		case equalFold(key, "keep-alive"):
			return hKeepAlive
		case equalFold(key, "tracestate"):
			return hTracestate
		}
	case 11:
		if equalFold(key, "traceparent") {
			return hTraceparent
		}
	case 15:
		switch {
		case equalFold(key, "x-forwarded-for"):
			return hXForwardedFor
		case equalFold(key, "x-forwarded-ssl"):
			return hXForwardedSsl
		}
	case 16:
		switch {
		case equalFold(key, "proxy-connection"):
			return hProxyConnection
		case equalFold(key, "x-forwarded-host"):
			return hXForwardedHost
		case equalFold(key, "x-forwarded-port"):
			return hXForwardedPort
		}
	case 17:
		switch {
		case equalFold(key, "transfer-encoding"):
			return hTransferEncoding
		case equalFold(key, "x-forwarded-proto"):
			return hXForwardedProto
		}
	case 18:
		switch {
		case equalFold(key, "proxy-authenticate"):
			return hProxyAuthenticate
		case equalFold(key, "x-forwarded-scheme"):
			return hXForwardedScheme
		}
	case 19:
		if equalFold(key, "proxy-authorization") {
			return hProxyAuthorization
		}
	case 20:
		if equalFold(key, "x-forwarded-protocol") {
			return hXForwardedProtocol
		}
	}
	return 0
}

// What a header-name byte says about the name, by nginx's rules
// (ignore_invalid_headers on): letters, digits and '-' make a valid name,
// '_' only with underscores_in_headers, and a space or a control byte makes
// the request bad (fasthttp refuses all but a space inside a name itself).
// Anything else fasthttp accepts in a name ('.', '!', '#', ...) makes the
// header one to drop.
const (
	nameValid      = 0
	nameUnderscore = 1
	nameInvalid    = 2
	nameSpace      = 4
	// nameEnd marks the bytes that end a name in scanRaw's table, ':' and
	// '\n', so its loop makes one test per byte.
	nameEnd = 0x80
)

var nameClass = func() (t [256]byte) {
	for i := range t {
		c := byte(i)
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-':
			t[i] = nameValid
		case c == '_':
			t[i] = nameUnderscore
		case c <= ' ' || c == 0x7f:
			t[i] = nameSpace
		default:
			t[i] = nameInvalid
		}
	}
	return t
}()

// scanClass is nameClass with the bytes that end a name marked.
var scanClass = func() (t [256]byte) {
	t = nameClass
	t[':'] |= nameEnd
	t['\n'] |= nameEnd
	return t
}()

// nameVerdict is what Serve does with a request header of that name.
type nameVerdict uint8

const (
	keepName   nameVerdict = iota
	dropName               // not passed to the origin
	rejectName             // the request is answered 400 and not proxied
)

// oddName judges one request header name, cls being the nameClass bits of
// its bytes. Besides nginx's rules it drops:
//   - with underscores allowed, a name that is one the edge removes or
//     writes once '_' reads as '-' (X_Real_IP, X_Forwarded_For): CGI, WSGI
//     and Rack make both HTTP_X_REAL_IP, so the client's would stand beside
//     (or in place of) the edge's;
//   - Proxy and every Proxy-* header without a bit of its own: they are
//     addressed to a proxy, the edge is that proxy, and a CGI origin reads
//     Proxy as its HTTP_PROXY setting ("httpoxy").
func oddName(name []byte, cls byte, underscores bool) nameVerdict {
	switch {
	case cls&nameSpace != 0 || len(name) == 0:
		return rejectName
	case cls&nameInvalid != 0,
		cls&nameUnderscore != 0 && (!underscores || spellsHandled(name)),
		isProxyName(name) && headerBit(name) == 0:
		return dropName
	}
	return keepName
}

// classOf ORs the nameClass bits of name's bytes.
func classOf(name []byte) byte {
	var cls byte
	for _, c := range name {
		cls |= nameClass[c]
	}
	return cls
}

// spellsHandled reports whether name, with '_' read as '-', is a header
// Serve removes or writes.
func spellsHandled(name []byte) bool {
	var buf [len("x-forwarded-protocol")]byte
	if len(name) > len(buf) {
		return false
	}
	for i, c := range name {
		if c == '_' {
			c = '-'
		}
		buf[i] = c
	}
	return headerBit(buf[:len(name)]) != 0
}

// isProxyName: "Proxy" or "Proxy-" followed by anything, any case.
func isProxyName(name []byte) bool {
	return len(name) >= 5 && equalFold(name[:5], "proxy") && (len(name) == 5 || name[5] == '-')
}

// scanRaw returns the bits of the headers named in a raw header block (the
// wire bytes after the request line, as RequestHeader.RawHeaders keeps
// them), in one pass; hOddName when some name is one oddName does not keep.
// Continuation lines (obs-fold: starting with a space or tab) belong to the
// header before them and name nothing; the blank line ends the block.
func scanRaw(raw []byte, underscores bool) uint32 {
	var present uint32
	i, n := 0, len(raw)
	for i < n {
		c := raw[i]
		if c == '\r' || c == '\n' {
			return present
		}
		if c != ' ' && c != '\t' {
			// Names are short: a plain loop beats IndexByte's call, and
			// it classifies the bytes on the way.
			start := i
			var cls byte
			for i < n {
				k := scanClass[raw[i]]
				if k&nameEnd != 0 {
					break
				}
				cls |= k
				i++
			}
			name := raw[start:i]
			first := c | 0x20
			if (cls != nameValid || first == 'p') && oddName(name, cls, underscores) != keepName {
				present |= hOddName
			}
			switch first {
			case 'c', 'e', 'f', 'k', 'p', 't', 'u', 'x':
				// The first letter of a name headerBit knows.
				present |= headerBit(name)
			}
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
func requestPresent(h *fasthttp.RequestHeader, underscores bool) uint32 {
	raw := h.RawHeaders()
	if len(raw) == 0 || len(h.PeekTrailerKeys()) > 0 {
		return allHeaders
	}
	present := scanRaw(raw, underscores)
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
func responsePresent(h *fasthttp.ResponseHeader) uint32 {
	if len(h.PeekTrailerKeys()) > 0 {
		return allHeaders
	}
	var present uint32
	for k := range h.All() {
		present |= headerBit(k)
	}
	return present
}

// dropOddNames removes the request headers oddName drops, and reports false
// when one of them makes the request bad. It reads the names from the raw
// header block and the trailer keys; a request built in code has no raw
// block, and its parsed names are read instead. scratch collects the names
// (deleting moves the bytes under us) and is returned for reuse.
func dropOddNames(h *fasthttp.RequestHeader, underscores bool, scratch []byte) ([]byte, bool) {
	scratch = scratch[:0]
	ok := true
	judge := func(name []byte) {
		switch oddName(name, classOf(name), underscores) {
		case rejectName:
			ok = false
		case dropName:
			// Length-prefixed: a name holds any byte fasthttp accepts.
			scratch = append(scratch, byte(len(name)>>8), byte(len(name)))
			scratch = append(scratch, name...)
		}
	}
	if raw := h.RawHeaders(); len(raw) > 0 {
		for i, n := 0, len(raw); i < n; {
			c := raw[i]
			if c == '\r' || c == '\n' {
				break
			}
			start := i
			for i < n && raw[i] != ':' && raw[i] != '\n' {
				i++
			}
			if c != ' ' && c != '\t' { // continuation lines name nothing
				judge(raw[start:i])
			}
			nl := bytes.IndexByte(raw[i:], '\n')
			if nl < 0 {
				break
			}
			i += nl + 1
		}
	} else {
		for k := range h.All() {
			judge(k)
		}
	}
	for _, k := range h.PeekTrailerKeys() {
		judge(k)
	}
	if !ok {
		return scratch, false
	}
	for rest := scratch; len(rest) > 0; {
		n := int(rest[0])<<8 | int(rest[1])
		h.DelBytes(rest[2 : 2+n])
		rest = rest[2+n:]
	}
	return scratch, true
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
func stripHopByHop[H headers](h H, present uint32, scratch []byte) []byte {
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
		h.Del(hopByHop[bits.TrailingZeros32(m)])
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

// hop is what Serve knows of the client and of the connection the request
// came over.
type hop struct {
	// clientIP is the real client as the caller resolved it (real_ip);
	// the peer when invalid.
	clientIP netip.Addr
	// trusted: the peer is a trusted proxy, so the forwarding headers it
	// sent are its testimony and pass on (X-Forwarded-For extended).
	trusted bool
	// underscores: upstreams.underscores_in_headers.
	underscores bool
	// full: the request is the cache's (a miss or a refresh): it goes
	// without the client's conditional headers.
	full bool
}

// conditionalHeaders make an origin answer 304, 412 or a part: never what
// a cache asks for on behalf of everyone.
var conditionalHeaders = [...]string{
	fasthttp.HeaderIfNoneMatch, fasthttp.HeaderIfModifiedSince, fasthttp.HeaderIfMatch,
	fasthttp.HeaderIfUnmodifiedSince, fasthttp.HeaderIfRange,
}

// prepare fills out with the request for the origin, or reports false when
// the request must not be proxied (a header name nginx would refuse); the
// scratch it returns holds the traceparent out carries (writeTrace). The
// body is referenced, not copied: out lives only while Serve runs on the
// handler's goroutine, which is also why ctx's slices never outlive the
// handler.
func prepare(out *fasthttp.Request, ctx *fasthttp.RequestCtx, from hop, buf []byte) ([]byte, bool) {
	copyRequest(out, ctx)
	if from.full {
		// The cache's own request: the full answer, whatever validators
		// the client that led it held (Cache.answerConditional answers
		// those from it).
		for _, name := range conditionalHeaders {
			out.Header.Del(name)
		}
	}
	// One scan of the raw header block finds which of the headers
	// rewriteHeaders handles are there; the absent ones are not searched for.
	return rewriteHeaders(out, ctx, from, requestPresent(&out.Header, from.underscores), buf)
}

func copyRequest(out *fasthttp.Request, ctx *fasthttp.RequestCtx) {
	ctx.Request.Header.CopyTo(&out.Header)
	out.SetBodyRaw(ctx.Request.Body())
	// Keep the Host the client sent (the URI's host would be lower-cased).
	out.UseHostHeader = true
	if uri := ctx.Request.Header.RequestURI(); len(uri) > 0 && uri[0] != '/' && uri[0] != '*' {
		// Absolute form (http://host/path): the target's host is the
		// request's host and the Host header is ignored (RFC 9112 §3.2.2).
		// It is also the host the route was matched with (ctx.Host()), so
		// the origin cannot be handed a Host its route was not chosen for.
		out.Header.SetHostBytes(ctx.Host())
	}
	// The origin is plain HTTP whatever the client used; an absolute
	// https:// request-target would otherwise make fasthttp refuse it.
	out.URI().SetScheme("http")
	out.Header.SetProtocol("HTTP/1.1")
	out.Header.SetNoDefaultContentType(true)
}

// rewriteHeaders strips the hop-by-hop headers, Expect and the names nginx
// would not pass, and sets the forwarding headers; present is
// requestPresent's answer, or allHeaders. false: the request is bad.
func rewriteHeaders(out *fasthttp.Request, ctx *fasthttp.RequestCtx, from hop, present uint32, buf []byte) ([]byte, bool) {
	if present&hOddName != 0 {
		var ok bool
		if buf, ok = dropOddNames(&out.Header, from.underscores, buf); !ok {
			return buf, false
		}
	}
	buf = stripHopByHop(&out.Header, present, buf)
	// The edge already answered any 100-continue and read the body; asking
	// the origin again would only cost it an interim response.
	if present&hExpect != 0 {
		out.Header.Del(fasthttp.HeaderExpect)
	}

	// X-Forwarded-For: from a trusted proxy, what it sent (all copies, as
	// nginx joins them) plus the peer ($proxy_add_x_forwarded_for); from
	// anyone else only the peer: a client's list is its own claim. Stripping
	// ran first so "Connection: X-Forwarded-For" cannot drop what we set.
	buf = buf[:0]
	if present&hXForwardedFor != 0 {
		if from.trusted {
			for _, v := range out.Header.PeekAll(headerXForwardedFor) {
				if len(buf) > 0 {
					buf = append(buf, ", "...)
				}
				buf = append(buf, v...)
			}
			if len(buf) > 0 {
				buf = append(buf, ", "...)
			}
		}
		out.Header.Del(headerXForwardedFor)
	}
	peer, _ := netip.AddrFromSlice(ctx.RemoteIP())
	peer = peer.Unmap()
	buf = peer.AppendTo(buf)
	out.Header.SetCanonical(keyXForwardedFor, buf)

	real := from.clientIP
	if !real.IsValid() {
		real = peer
	}
	mark := len(buf)
	buf = real.Unmap().AppendTo(buf)
	// Set replaces only the first copy: a client sending the header twice
	// would get its second copy through to the origin. Delete every copy.
	if present&hXRealIP != 0 {
		out.Header.Del(headerXRealIP)
	}
	out.Header.SetCanonical(keyXRealIP, buf[mark:])

	// X-Forwarded-Proto, -Host, -Port, -Scheme, -Ssl, -Protocol and
	// Forwarded: a trusted proxy's pass; anyone else's go. The edge writes
	// X-Forwarded-Proto (of its own listener) when none is left, also when
	// the Connection header named the proxy's (it was for this hop only).
	if !from.trusted {
		for _, t := range testimony {
			if present&t.bit != 0 {
				out.Header.Del(t.name)
			}
		}
	} else if present&(hConnection|hXForwardedProto) == hConnection|hXForwardedProto &&
		len(out.Header.Peek(headerXForwardedProto)) == 0 {
		present &^= hXForwardedProto
	}
	if !from.trusted || present&hXForwardedProto == 0 {
		if ctx.IsTLS() {
			out.Header.SetCanonical(keyXForwardedProto, valueHTTPS)
		} else {
			out.Header.SetCanonical(keyXForwardedProto, valueHTTP)
		}
	}
	buf = writeTrace(&out.Header, &ctx.Request.Header, present, buf)
	return buf, true
}

// requestRejection is the answer to a request the edge does not proxy, nil
// for the others: a method methodRejection refuses, or userinfo in an
// absolute request-target (http://user:pw@host/): fasthttp's client would
// turn it into an Authorization header, an origin would answer as that
// user, and a cache would keep it for everyone. It is refused (400) rather
// than dropped: no browser sends it, so it is someone's probe.
func requestRejection(ctx *fasthttp.RequestCtx) *api.Rejection {
	if rej := methodRejection(ctx.Method()); rej != nil {
		return rej
	}
	if hasUserinfo(ctx) {
		return api.BadRequest
	}
	return nil
}

// hasUserinfo: the request-target names a user or a password. Only the
// absolute form can (the origin form starts with '/', which fasthttp reads
// as a path even when it is "//user@host").
func hasUserinfo(ctx *fasthttp.RequestCtx) bool {
	if uri := ctx.Request.Header.RequestURI(); len(uri) > 0 && uri[0] == '/' {
		return false
	}
	u := ctx.URI()
	return len(u.Username()) > 0 || len(u.Password()) > 0
}

// methodRejection is the answer to a method the edge does not proxy, nil for
// the others. As nginx: TRACE (it would echo the request, cookies included,
// back to a script) and CONNECT (a tunnel, not a request) are 405; a method
// that is not upper-case letters, '_' and '-' is 400 ("get" is not GET, and
// an origin that reads it as GET would do so behind the edge's back).
func methodRejection(m []byte) *api.Rejection {
	switch string(m) {
	case fasthttp.MethodGet, fasthttp.MethodPost, fasthttp.MethodHead:
		return nil
	case fasthttp.MethodTrace, fasthttp.MethodConnect:
		return api.MethodNotAllowed
	}
	if len(m) == 0 {
		return api.BadRequest
	}
	for _, c := range m {
		if (c < 'A' || c > 'Z') && c != '_' && c != '-' {
			return api.BadRequest
		}
	}
	return nil
}
