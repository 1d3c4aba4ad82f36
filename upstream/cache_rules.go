package upstream

import (
	"bytes"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// verdict is what an origin answer's headers allow the cache to do with it.
type verdict struct {
	// shareable: the answer is not private to its request, so waiters for
	// the same key may get it, and it may be stored if its status allows.
	shareable bool
	// maxAge is s-maxage, else max-age; -1 when neither is given.
	maxAge time.Duration
	// noStale: must-revalidate or proxy-revalidate, no stale answers.
	noStale bool
	// vary lists the request headers the answer varies on (lower case).
	vary []string
	// age is the origin's Age; hasAge: it sent a valid one.
	age    time.Duration
	hasAge bool
}

// judge reads Set-Cookie, Cache-Control, Vary, Expires, Date and Age (the
// rules are Cache's doc), now being the time the answer arrived. It runs on
// the miss path only.
func judge(h *fasthttp.ResponseHeader, now int64) verdict {
	v := verdict{shareable: true, maxAge: -1}
	cookies := false
	h.VisitAllCookie(func(_, _ []byte) { cookies = true })
	if cookies {
		return verdict{}
	}
	sMaxAge := time.Duration(-1)
	var expires, date []byte
	hasExpires, sawAge := false, false
	h.VisitAll(func(key, value []byte) {
		switch {
		case equalFold(key, "expires"):
			if !hasExpires {
				expires, hasExpires = value, true
			}
		case equalFold(key, "date"):
			if date == nil {
				date = value
			}
		case equalFold(key, "age"):
			if !sawAge {
				sawAge = true
				v.age, v.hasAge = deltaSeconds(value)
			}
		case equalFold(key, "cache-control"):
			eachToken(value, func(tok []byte) {
				name, arg, _ := bytes.Cut(tok, []byte{'='})
				name = bytes.TrimSpace(name)
				switch {
				case equalFold(name, "no-store"), equalFold(name, "no-cache"), equalFold(name, "private"):
					v.shareable = false
				case equalFold(name, "must-revalidate"), equalFold(name, "proxy-revalidate"):
					v.noStale = true
				case equalFold(name, "max-age"):
					v.maxAge = seconds(arg)
				case equalFold(name, "s-maxage"):
					sMaxAge = seconds(arg)
				}
			})
		case equalFold(key, "vary"):
			eachToken(value, func(tok []byte) {
				if len(tok) == 1 && tok[0] == '*' {
					v.shareable = false
					return
				}
				v.vary = append(v.vary, string(bytes.ToLower(tok)))
			})
		}
	})
	if !v.shareable {
		return verdict{}
	}
	switch {
	case sMaxAge >= 0:
		v.maxAge = sMaxAge
	case v.maxAge >= 0:
	case hasExpires:
		v.maxAge = expiresIn(expires, date, now)
	}
	return v
}

// expiresIn is the freshness lifetime Expires gives (RFC 9111 §4.2.1):
// Expires minus Date (the origin's own clock on both sides), or minus now
// without a valid Date. An invalid Expires ("0", "-1") is in the past: 0.
func expiresIn(expires, date []byte, now int64) time.Duration {
	exp, err := fasthttp.ParseHTTPDate(bytes.TrimSpace(expires))
	if err != nil {
		return 0
	}
	base := now
	if d, err := fasthttp.ParseHTTPDate(bytes.TrimSpace(date)); err == nil && date != nil {
		base = d.UnixNano()
	}
	return max(time.Duration(exp.UnixNano()-base), 0)
}

// deltaSeconds parses a whole Age value: digits only (RFC 9111 §1.2.2),
// capped like seconds.
func deltaSeconds(v []byte) (time.Duration, bool) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return 0, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	return seconds(v), true
}

// answerConditional answers a conditional GET or HEAD from the full answer
// in ctx.Response (a hit, a shared answer, or the origin's answer to the
// cache's own request, which carried no validator): 304 with the answer's
// headers and no body when the client's If-None-Match names its ETag (weak
// comparison, RFC 9110 §13.1.2), or, without If-None-Match, when its
// Last-Modified is not after If-Modified-Since. Only a 200 turns into a 304.
func answerConditional(ctx *fasthttp.RequestCtx) {
	resp := &ctx.Response
	if resp.StatusCode() != fasthttp.StatusOK {
		return
	}
	h := &ctx.Request.Header
	if inm := h.Peek(fasthttp.HeaderIfNoneMatch); len(inm) > 0 {
		if !etagListMatches(inm, resp.Header.Peek(fasthttp.HeaderETag)) {
			return
		}
	} else if ims := h.Peek(fasthttp.HeaderIfModifiedSince); len(ims) > 0 {
		lm := resp.Header.Peek(fasthttp.HeaderLastModified)
		if len(lm) == 0 {
			return
		}
		since, err := fasthttp.ParseHTTPDate(ims)
		modified, err2 := fasthttp.ParseHTTPDate(lm)
		if err != nil || err2 != nil || modified.After(since) {
			return
		}
	} else {
		return
	}
	resp.SetStatusCode(fasthttp.StatusNotModified)
	resp.SetBodyRaw(nil)
}

// etagListMatches: If-None-Match's list names etag ("*" any), weakly.
func etagListMatches(list, etag []byte) bool {
	if len(etag) == 0 {
		return false
	}
	etag = bytes.TrimPrefix(etag, []byte("W/"))
	for rest := list; len(rest) > 0; {
		var tok []byte
		tok, rest = nextToken(rest)
		if (len(tok) == 1 && tok[0] == '*') || bytes.Equal(bytes.TrimPrefix(tok, []byte("W/")), etag) {
			return true
		}
	}
	return false
}

// eachToken calls f with each comma-separated, trimmed, non-empty token.
func eachToken(list []byte, f func(tok []byte)) {
	for len(list) > 0 {
		var tok []byte
		tok, list, _ = bytes.Cut(list, []byte{','})
		if tok = bytes.TrimSpace(tok); len(tok) > 0 {
			f(tok)
		}
	}
}

// seconds parses a delta-seconds argument (quotes allowed); a malformed one
// counts as 0, which stores nothing: the origin meant to limit caching.
func seconds(arg []byte) time.Duration {
	arg = bytes.Trim(bytes.TrimSpace(arg), `"`)
	n, err := strconv.ParseInt(string(arg), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	if n > int64(365*24*time.Hour/time.Second) {
		n = int64(365 * 24 * time.Hour / time.Second)
	}
	return time.Duration(n) * time.Second
}
