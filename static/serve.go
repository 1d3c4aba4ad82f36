package static

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// Header keys are in fasthttp's normalized form ("Etag", not "ETag") so that
// SetCanonical skips normalization and Peek finds them again.
var (
	hdrAllow       = []byte("Allow")
	hdrVary        = []byte("Vary")
	hdrCacheCtl    = []byte("Cache-Control")
	hdrETag        = []byte("Etag")
	hdrNosniff     = []byte("X-Content-Type-Options")
	hdrCSP         = []byte("Content-Security-Policy")
	hdrReferrer    = []byte("Referrer-Policy")
	valAllow       = []byte("GET, HEAD")
	valVary        = []byte("Accept-Encoding")
	valNosniff     = []byte("nosniff")
	valReferrer    = []byte("same-origin")
	valGzip        = []byte("gzip")
	valTextPlain   = []byte("text/plain; charset=utf-8")
	body404        = []byte("Not Found\n")
	body405        = []byte("Method Not Allowed\n")
	methodHead     = []byte(fasthttp.MethodHead)
	methodGet      = []byte(fasthttp.MethodGet)
	hdrIfNoneMatch = fasthttp.HeaderIfNoneMatch
	hdrAcceptEnc   = fasthttp.HeaderAcceptEncoding
)

// ServePage answers GET /seckill/{productId}: the same HTML for every
// product (the page reads the id from its own URL), so it caches as one
// object everywhere.
func (h *Handler) ServePage(ctx *fasthttp.RequestCtx) {
	serve(ctx, h.page)
}

// ServeAsset answers GET /seckill/_static/{name}. Only names the handler
// holds are served; anything else, ".." and encoded or absolute forms
// included, is a 404 because it is simply not a key of the set.
func (h *Handler) ServeAsset(ctx *fasthttp.RequestCtx, name []byte) {
	f, ok := h.assets[string(name)] // no allocation: the compiler reads the bytes in place
	if !ok {
		plain(ctx, fasthttp.StatusNotFound, body404)
		return
	}
	serve(ctx, f)
}

func serve(ctx *fasthttp.RequestCtx, f *file) {
	method := ctx.Method()
	head := bytes.Equal(method, methodHead)
	if !head && !bytes.Equal(method, methodGet) {
		ctx.Response.Header.SetCanonical(hdrAllow, valAllow)
		plain(ctx, fasthttp.StatusMethodNotAllowed, body405)
		return
	}
	rh := &ctx.Response.Header
	gz := f.gz != nil && acceptsGzip(ctx.Request.Header.Peek(hdrAcceptEnc))
	if inm := ctx.Request.Header.Peek(hdrIfNoneMatch); len(inm) > 0 && etagMatches(inm, f) {
		// The 304 carries the 200's validators and policies (RFC 9110
		// 15.4.5), no body and no type.
		etag := f.etag
		if gz {
			etag = f.etagGz
		}
		setCommon(rh, f, etag)
		ctx.Response.ResetBody()
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	ok, body := f.ok, f.body
	if gz {
		ok, body = f.okGz, f.gz
	}
	// The response is fresh here (nothing before the page handler writes
	// to it), so taking the template's header whole loses nothing.
	ok.CopyTo(rh)
	// SetBodyRaw keeps a reference instead of copying: the bytes are
	// immutable for the handler's life. fasthttp derives Content-Length from
	// the body, for HEAD too (it then skips writing the body).
	ctx.Response.SetBodyRaw(body)
	if head {
		ctx.Response.SkipBody = true
	}
}

// setCommon sets the headers every answer with f's content carries, 200 or
// 304; etag is the tag of the coding answered.
func setCommon(rh *fasthttp.ResponseHeader, f *file, etag []byte) {
	// Vary even on identity answers: a shared cache must not hand this
	// identity copy to a client that asked for gzip, or the other way round.
	rh.SetCanonical(hdrVary, valVary)
	rh.SetCanonical(hdrETag, etag)
	rh.SetCanonical(hdrCacheCtl, f.cacheControl)
	rh.SetCanonical(hdrNosniff, valNosniff)
	if f.csp != nil {
		rh.SetCanonical(hdrCSP, f.csp)
		rh.SetCanonical(hdrReferrer, valReferrer)
	}
}

func plain(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.Response.Header.SetContentTypeBytes(valTextPlain)
	ctx.Response.Header.SetCanonical(hdrNosniff, valNosniff)
	ctx.Response.SetBodyRaw(body)
}

// acceptsGzip reads an Accept-Encoding value (RFC 9110 12.5.3): gzip (or
// x-gzip) with a non-zero weight, or failing an explicit mention, "*" with a
// non-zero weight. "gzip;q=0" is a refusal, which a substring test gets wrong.
func acceptsGzip(ae []byte) bool {
	gzipQ, starQ := -1, -1 // -1 absent, 0 refused, 1 accepted
	for len(ae) > 0 {
		var item []byte
		if i := bytes.IndexByte(ae, ','); i >= 0 {
			item, ae = ae[:i], ae[i+1:]
		} else {
			item, ae = ae, nil
		}
		coding, params, _ := bytes.Cut(item, []byte{';'})
		coding = trimOWS(coding)
		q := weight(params)
		switch {
		case equalFold(coding, "gzip"), equalFold(coding, "x-gzip"):
			if q > gzipQ {
				gzipQ = q
			}
		case len(coding) == 1 && coding[0] == '*':
			starQ = q
		}
	}
	if gzipQ >= 0 {
		return gzipQ > 0
	}
	return starQ > 0
}

// weight returns 0 when the parameters carry q=0 (in any of its spellings:
// 0, 0., 0.0, 0.000), 1 otherwise. A malformed q counts as 0: refusing gzip
// costs bytes, sending it to a client that cannot read it costs the page.
func weight(params []byte) int {
	for len(params) > 0 {
		var p []byte
		if i := bytes.IndexByte(params, ';'); i >= 0 {
			p, params = params[:i], params[i+1:]
		} else {
			p, params = params, nil
		}
		p = trimOWS(p)
		if len(p) < 2 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=' {
			continue
		}
		v := p[2:]
		switch {
		case len(v) == 0 || len(v) > 5:
			return 0
		case v[0] == '1':
			for _, c := range v[1:] {
				if c != '.' && c != '0' {
					return 0
				}
			}
			return 1
		case v[0] == '0':
			if len(v) == 1 {
				return 0
			}
			if v[1] != '.' {
				return 0
			}
			nonzero := 0
			for _, c := range v[2:] {
				if c < '0' || c > '9' {
					return 0
				}
				if c != '0' {
					nonzero = 1
				}
			}
			return nonzero
		default:
			return 0
		}
	}
	return 1
}

// etagMatches applies If-None-Match's weak comparison (RFC 9110 13.1.2):
// "*" matches, W/ prefixes are ignored, and either of the file's tags (plain
// or gzip) matches, as both name the same content.
func etagMatches(inm []byte, f *file) bool {
	for {
		inm = trimOWSComma(inm)
		if len(inm) == 0 {
			return false
		}
		if inm[0] == '*' {
			return true
		}
		if len(inm) > 2 && inm[0] == 'W' && inm[1] == '/' {
			inm = inm[2:]
		}
		var tag []byte
		if inm[0] == '"' {
			end := bytes.IndexByte(inm[1:], '"')
			if end < 0 {
				return false
			}
			tag, inm = inm[:end+2], inm[end+2:]
		} else {
			// Unquoted tags are invalid but sent by some clients; compare
			// them with the quotes added back.
			end := bytes.IndexByte(inm, ',')
			if end < 0 {
				end = len(inm)
			}
			tag, inm = trimOWS(inm[:end]), inm[end:]
			if quotedEqual(f.etag, tag) || quotedEqual(f.etagGz, tag) {
				return true
			}
			continue
		}
		if bytes.Equal(tag, f.etag) || bytes.Equal(tag, f.etagGz) {
			return true
		}
	}
}

func quotedEqual(quoted, bare []byte) bool {
	return len(quoted) == len(bare)+2 && bytes.Equal(quoted[1:len(quoted)-1], bare)
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func trimOWSComma(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == ',') {
		b = b[1:]
	}
	return b
}

// equalFold compares ASCII case-insensitively without allocating.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
