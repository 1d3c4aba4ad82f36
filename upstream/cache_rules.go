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
	vary [][]byte
}

// judge reads Set-Cookie, Cache-Control and Vary (the rules are Cache's
// doc). It runs on the miss path only.
func judge(h *fasthttp.ResponseHeader) verdict {
	v := verdict{shareable: true, maxAge: -1}
	cookies := false
	h.VisitAllCookie(func(_, _ []byte) { cookies = true })
	if cookies {
		return verdict{}
	}
	sMaxAge := time.Duration(-1)
	h.VisitAll(func(key, value []byte) {
		switch {
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
				v.vary = append(v.vary, bytes.ToLower(tok))
			})
		}
	})
	if !v.shareable {
		return verdict{}
	}
	if sMaxAge >= 0 {
		v.maxAge = sMaxAge
	}
	return v
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
