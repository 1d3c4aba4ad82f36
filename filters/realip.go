package filters

import (
	"net"
	"net/netip"
	"strings"

	"github.com/valyala/fasthttp"

	"flashgate/conf/field"
)

// RealIP finds the client address behind trusted proxies, like nginx's realip
// module with real_ip_recursive on. It is immutable after NewRealIP and safe
// for concurrent use; the proxy calls Resolve once per request and stores the
// result in Request.ClientIP before the chain runs.
type RealIP struct {
	header  string // as configured; fasthttp normalizes it on lookup
	trusted rangeSet
	any     bool // at least one trusted proxy; otherwise Resolve is the peer
}

// NewRealIP compiles the trusted proxies (single addresses or CIDRs). Errors
// name the entry, e.g. "trusted_proxies[1]", relative to the real_ip section.
func NewRealIP(header string, trustedCIDRs []string) (*RealIP, field.Errors) {
	var errs field.Errors
	if !isToken(header) {
		errs.Add("header", "%q is not a valid header name", header)
	} else if strings.EqualFold(header, "Forwarded") {
		// RFC 7239 (for=...;proto=...) is a different syntax; reading it as a
		// plain list would silently never find an address.
		errs.Add("header", "the Forwarded header (RFC 7239) is not supported; use X-Forwarded-For or X-Real-IP")
	}
	rules := make([]prefixRule, 0, len(trustedCIDRs))
	for i, s := range trustedCIDRs {
		p, err := parseCIDR(strings.TrimSpace(s))
		if err != nil {
			errs.Add(field.Index("trusted_proxies", i), "%v", err)
			continue
		}
		rules = append(rules, rulePrefix(p, 1))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &RealIP{header: header, trusted: buildRangeSet(rules, 0), any: len(rules) > 0}, nil
}

// Header is the header name Resolve reads.
func (ri *RealIP) Header() string { return ri.header }

// Trusted reports whether a is one of the trusted proxies.
func (ri *RealIP) Trusted(a netip.Addr) bool {
	return ri.any && a.IsValid() && ri.trusted.lookup(addrU128(a)) == 1
}

// Resolve returns the client address of the request.
//
// The peer address is the answer unless the peer is a trusted proxy: a header
// sent by anyone else is the client's own claim and is ignored entirely. From
// a trusted peer the header's addresses are walked from the right (the entry
// the nearest proxy appended) skipping trusted ones; the first untrusted one
// is the client. If every entry is trusted the leftmost wins. A malformed
// entry stops the walk and the last good address (maybe the peer) is used,
// since whatever lies left of garbage cannot be vouched for.
//
// Entries are separated by commas or spaces (as nginx reads them) and may
// carry a port ("1.2.3.4:5678", "[2001:db8::1]:443"). Several header lines of
// the same name count as one list in the order received (RFC 9110 5.3); they
// are read with PeekAll, which reuses a buffer inside the header and so does
// not allocate once warm. A header that arrived in the trailer section of a
// chunked body is never believed: only the header section is read then, by
// scanning the raw header bytes, because a trailer sits after every line the
// trusted proxy wrote and would otherwise be taken as the rightmost entry.
// (fasthttp already refuses X-Forwarded-* and X-Real-IP trailers; this covers
// any other header name, such as X-Client-IP.)
//
// The result is unmapped (::ffff:1.2.3.4 becomes 1.2.3.4). It is the zero
// Addr when the peer is not a TCP address (e.g. a unix socket).
func (ri *RealIP) Resolve(ctx *fasthttp.RequestCtx) netip.Addr {
	addr := peerAddr(ctx)
	if !ri.Trusted(addr) {
		return addr
	}
	h := &ctx.Request.Header
	if ri.inTrailer(h) {
		return ri.walkRaw(h.RawHeaders(), addr)
	}
	return ri.fromLines(addr, h.PeekAll(ri.header))
}

// fromLines walks header lines (in the order received) from the last one.
func (ri *RealIP) fromLines(addr netip.Addr, lines [][]byte) netip.Addr {
	for i := len(lines) - 1; i >= 0; i-- {
		var done bool
		if addr, done = ri.walk(lines[i], addr); done {
			break
		}
	}
	return addr
}

// walk consumes one header value from the right. done means the answer is
// found (an untrusted address, or a malformed entry that stops the walk).
func (ri *RealIP) walk(v []byte, addr netip.Addr) (netip.Addr, bool) {
	end := len(v)
	for end > 0 {
		for end > 0 && isSep(v[end-1]) {
			end--
		}
		if end == 0 {
			break
		}
		start := end
		for start > 0 && !isSep(v[start-1]) {
			start--
		}
		a, ok := parseHostPort(v[start:end])
		if !ok {
			return addr, true
		}
		addr = a.Unmap()
		if !ri.Trusted(addr) {
			return addr, true
		}
		end = start
	}
	return addr, false
}

// walkRaw walks the header-section lines named ri.header from the last one.
func (ri *RealIP) walkRaw(raw []byte, addr netip.Addr) netip.Addr {
	end := len(raw)
	for end > 0 {
		start := end - 1
		for start > 0 && raw[start-1] != '\n' {
			start--
		}
		line := raw[start:end]
		end = start
		name, value, ok := splitHeaderLine(line)
		if !ok || !equalFoldASCII(name, ri.header) {
			continue
		}
		var done bool
		if addr, done = ri.walk(value, addr); done {
			return addr
		}
	}
	return addr
}

func (ri *RealIP) inTrailer(h *fasthttp.RequestHeader) bool {
	for _, k := range h.PeekTrailerKeys() {
		if equalFoldASCII(k, ri.header) {
			return true
		}
	}
	return false
}

func splitHeaderLine(line []byte) (name, value []byte, ok bool) {
	for len(line) > 0 && (line[len(line)-1] == '\n' || line[len(line)-1] == '\r') {
		line = line[:len(line)-1]
	}
	for i, c := range line {
		if c == ':' {
			return line[:i], line[i+1:], true
		}
	}
	return nil, nil, false
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func isSep(c byte) bool { return c == ',' || c == ' ' || c == '\t' }

func equalFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		if lowerASCII(b[i]) != lowerASCII(s[i]) {
			return false
		}
	}
	return true
}

// peerAddr is the TCP peer of the connection, unmapped.
func peerAddr(ctx *fasthttp.RequestCtx) netip.Addr {
	if a, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// isToken reports whether s is an RFC 9110 token (a valid header name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
