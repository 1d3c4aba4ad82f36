package upstream

import (
	"math/rand/v2"

	"github.com/valyala/fasthttp"
)

// W3C Trace Context (https://www.w3.org/TR/trace-context/): every proxied
// request reaches the origin with a traceparent the edge wrote,
//
//	traceparent: 00-<trace-id: 32 hex>-<parent-id: 16 hex>-<flags: 2 hex>
//
// The trace id is the client's when it sent one valid traceparent, else a
// new random one; the parent id is always new (the edge's own span); the
// flags keep only the client's sampled bit (a new trace is not sampled: the
// edge records no spans, only the id in its access log). tracestate passes
// with a valid traceparent and goes with an invalid or absent one: it
// belongs to the trace that was dropped.
//
// Valid is what the specification's version-00 parser accepts: lower-case
// hex, the dashes in place, neither id all zeros, version ff refused, a
// later version's first four fields read and anything after them ignored
// (it must start with '-'). Two traceparent lines are invalid (the header is
// not a list). A malformed value is never passed on, and never logged.
const (
	traceparentLen = 55
	traceIDStart   = 3
	traceIDEnd     = traceIDStart + 32
	parentIDEnd    = traceIDEnd + 1 + 16
)

// The names as fasthttp normalizes them (SetCanonical skips the copy).
var keyTraceparent = []byte("Traceparent")

const (
	headerTraceparent = "Traceparent"
	headerTracestate  = "Tracestate"
)

// hexDigit is 1 for the lower-case hex digits, the only ones allowed.
var hexDigit = func() (t [256]bool) {
	for _, c := range []byte("0123456789abcdef") {
		t[c] = true
	}
	return t
}()

const hexChars = "0123456789abcdef"

// validTraceparent reports whether v is a traceparent the edge keeps the
// trace id and sampled flag of.
func validTraceparent(v []byte) bool {
	if len(v) < traceparentLen || v[2] != '-' || v[traceIDEnd] != '-' || v[parentIDEnd] != '-' {
		return false
	}
	if !hexDigit[v[0]] || !hexDigit[v[1]] || (v[0] == 'f' && v[1] == 'f') {
		return false
	}
	if v[0] == '0' && v[1] == '0' {
		if len(v) != traceparentLen {
			return false
		}
	} else if len(v) > traceparentLen && v[traceparentLen] != '-' {
		return false
	}
	return hexField(v[traceIDStart:traceIDEnd]) && hexField(v[traceIDEnd+1:parentIDEnd]) &&
		hexDigit[v[parentIDEnd+1]] && hexDigit[v[parentIDEnd+2]]
}

// hexField: lower-case hex, not all zeros.
func hexField(f []byte) bool {
	zero := true
	for _, c := range f {
		if !hexDigit[c] {
			return false
		}
		zero = zero && c == '0'
	}
	return !zero
}

// clientTraceparent is the one valid traceparent of h, nil if none (absent,
// malformed, or sent twice). present: h may hold a traceparent.
func clientTraceparent(h *fasthttp.RequestHeader, present bool) []byte {
	if !present {
		return nil
	}
	all := h.PeekAll(headerTraceparent)
	if len(all) != 1 || !validTraceparent(all[0]) {
		return nil
	}
	return all[0]
}

// appendTraceparent appends the traceparent the origin gets: the trace id
// and sampled flag of client (a valid traceparent, or nil for a new trace)
// and a new parent id.
func appendTraceparent(b, client []byte) []byte {
	b = append(b, "00-"...)
	sampled := false
	if client != nil {
		b = append(b, client[traceIDStart:traceIDEnd]...)
		// The sampled bit is the low bit of the flags' second digit; the
		// value of 'a'..'f' is even where the letter's offset is.
		flags := client[parentIDEnd+2]
		if flags >= 'a' {
			flags -= 'a'
		}
		sampled = flags&1 == 1
	} else {
		b = appendRandomHex(b, 16)
	}
	b = append(b, '-')
	b = appendRandomHex(b, 8)
	if sampled {
		return append(b, "-01"...)
	}
	return append(b, "-00"...)
}

// appendRandomHex appends n random bytes, never all zero, in hex.
func appendRandomHex(b []byte, n int) []byte {
	for {
		start := len(b)
		zero := true
		for i := 0; i < n; i += 8 {
			r := rand.Uint64()
			zero = zero && r == 0
			for j := 0; j < 8 && i+j < n; j++ {
				c := byte(r >> (8 * j))
				b = append(b, hexChars[c>>4], hexChars[c&15])
			}
		}
		if !zero {
			return b
		}
		b = b[:start]
	}
}

// TraceID is the trace id of the request's traceparent: after a proxied
// request, the one its origin got (Pool.serve writes it on the client's
// request); for any other, the client's when valid; nil when there is none
// (also when a client sent two and the edge replaced only the first). For the access log: it does not allocate, and the
// bytes are h's.
func TraceID(h *fasthttp.RequestHeader) []byte {
	if v := clientTraceparent(h, true); v != nil {
		return v[traceIDStart:traceIDEnd]
	}
	return nil
}

// writeTrace sets the origin's traceparent on out, after the hop-by-hop
// headers are gone (no Connection token removes it); in is the client's
// request. tracestate goes with a client's invalid or absent traceparent.
// The returned buf holds the traceparent written (Pool.serve copies it to
// the client's request for the access log).
func writeTrace(out, in *fasthttp.RequestHeader, present uint32, buf []byte) []byte {
	client := clientTraceparent(in, present&hTraceparent != 0)
	if client == nil && present&hTracestate != 0 {
		out.Del(headerTracestate)
	}
	buf = appendTraceparent(buf[:0], client)
	if present&hTraceparent != 0 {
		// Set replaces the first copy only.
		out.Del(headerTraceparent)
	}
	out.SetCanonical(keyTraceparent, buf)
	return buf
}
