package dashboard

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/sale/api"
)

//go:embed site
var siteFS embed.FS

// Paths the handler owns.
const (
	PathRoot   = "/admin/"
	PathPage   = "/admin/dashboard"
	PathJSON   = "/admin/dashboard.json"
	PathEvents = "/admin/dashboard/events"
	// PathHistory is the charts' history (History.View as JSON);
	// ?since=<unix ms> asks only for the seconds after it.
	PathHistory = "/admin/dashboard/history"
	// AssetPrefix is where the page's JS, CSS and icon are served.
	AssetPrefix = "/admin/_static/"
)

const (
	pageFile = "index.html"
	// eventInterval is how often a stream pushes a snapshot.
	eventInterval = time.Second
	// heartbeatInterval spaces the comment lines that tell intermediaries
	// (and the browser) the stream is alive even if the source stalls.
	heartbeatInterval = 15 * time.Second
	// maxStreamDuration ends a stream so that a forgotten tab does not hold
	// a connection for ever; EventSource reconnects by itself.
	maxStreamDuration = 10 * time.Minute
	// maxStreams bounds open streams; beyond it a page falls back to polling.
	maxStreams = 32
)

// Handler serves the dashboard page, its assets, the snapshot as JSON and
// as a Server-Sent Events stream. It is safe for concurrent use.
type Handler struct {
	source  func() Snapshot
	history *History
	page    *file
	assets  map[string]*file

	interval, heartbeat, maxStream time.Duration
	maxStreams                     int32
	streams                        atomic.Int32

	done      chan struct{}
	closeOnce sync.Once
}

// file is one prepared response: both encodings and their tags.
type file struct {
	body, gz     []byte // gz nil when it does not pay off
	contentType  string
	etag, etagGz string // strong tags, one per byte sequence
	cacheControl string
}

// New prepares the embedded page. source is called once per JSON request
// and once per second per open stream, from any goroutine; it must be
// cheap (read atomics and cached values, never block on Redis or Kafka).
// history is the ring the edge's sampler fills, served for the charts.
func New(source func() Snapshot, history *History) *Handler {
	h := &Handler{
		source:     source,
		history:    history,
		assets:     map[string]*file{},
		interval:   eventInterval,
		heartbeat:  heartbeatInterval,
		maxStream:  maxStreamDuration,
		maxStreams: maxStreams,
		done:       make(chan struct{}),
	}
	sub, err := fs.Sub(siteFS, "site")
	if err != nil {
		panic(err)
	}
	var html []byte
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		if p == pageFile {
			html = b
			return nil
		}
		// Links on the page carry ?v=<hash>, so an asset can be cached
		// for long: a changed one has a new URL.
		h.assets[p] = prepare(p, b, "private, max-age=31536000, immutable")
		return nil
	})
	if err != nil || html == nil {
		panic(fmt.Sprintf("dashboard: embedded page broken: %v", err))
	}
	for name, f := range h.assets {
		html = bytes.ReplaceAll(html, []byte(`"`+AssetPrefix+name+`"`),
			[]byte(`"`+AssetPrefix+name+"?v="+f.etag[1:11]+`"`))
	}
	// The page revalidates every time (cheap with the ETag) so that a new
	// binary's page, and with it new asset URLs, shows up at once.
	h.page = prepare(pageFile, html, "no-cache")
	return h
}

func prepare(name string, body []byte, cacheControl string) *file {
	sum := sha256.Sum256(body)
	tag := hex.EncodeToString(sum[:12])
	f := &file{body: body, contentType: contentType(name), etag: `"` + tag + `"`, etagGz: `"` + tag + `-gz"`, cacheControl: cacheControl}
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression) // the level is valid
	w.Write(body)
	w.Close()
	if buf.Len()+buf.Len()/20 < len(body) {
		f.gz = buf.Bytes()
	}
	return f
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	return "application/octet-stream"
}

// csp allows the admin listener itself and nothing else; the page has no
// inline script or style, so an injected one cannot run.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// IsPublic reports whether path is the page or one of its assets: they hold
// no data and must load without the admin token, which a browser navigating
// to the page cannot send. Everything else the handler serves (the JSON
// and the event stream) needs the token when one is configured.
func IsPublic(path []byte) bool {
	switch string(path) {
	case PathRoot, PathPage, "/admin":
		return true
	}
	return bytes.HasPrefix(path, []byte(AssetPrefix))
}

// Serve answers the dashboard's paths and reports false, touching nothing,
// for any other path.
func (h *Handler) Serve(ctx *fasthttp.RequestCtx) bool {
	p := ctx.Path()
	switch string(p) {
	case PathRoot, PathPage, "/admin":
		h.serveFile(ctx, h.page)
	case PathJSON:
		h.serveJSON(ctx)
	case PathEvents:
		h.serveEvents(ctx)
	case PathHistory:
		h.serveHistory(ctx)
	default:
		name, ok := bytes.CutPrefix(p, []byte(AssetPrefix))
		if !ok {
			return false
		}
		f := h.assets[string(name)]
		if f == nil {
			writeError(ctx, api.NotFound)
			return true
		}
		h.serveFile(ctx, f)
	}
	return true
}

// Close ends every open event stream (and refuses new ones), so that a
// graceful shutdown does not wait for them. Call it when draining.
func (h *Handler) Close() {
	h.closeOnce.Do(func() { close(h.done) })
}

func getOrHead(ctx *fasthttp.RequestCtx) bool {
	if ctx.IsGet() || ctx.IsHead() {
		return true
	}
	writeError(ctx, api.MethodNotAllowed)
	ctx.Response.Header.Set(fasthttp.HeaderAllow, "GET, HEAD")
	return false
}

func (h *Handler) serveFile(ctx *fasthttp.RequestCtx, f *file) {
	if !getOrHead(ctx) {
		return
	}
	rh := &ctx.Response.Header
	gz := f.gz != nil && acceptsGzip(ctx.Request.Header.Peek(fasthttp.HeaderAcceptEncoding))
	etag := f.etag
	if gz {
		etag = f.etagGz
	}
	rh.Set(fasthttp.HeaderVary, "Accept-Encoding")
	rh.Set(fasthttp.HeaderETag, etag)
	rh.Set(fasthttp.HeaderCacheControl, f.cacheControl)
	setSecurityHeaders(rh)
	if inm := ctx.Request.Header.Peek(fasthttp.HeaderIfNoneMatch); len(inm) > 0 && etagMatches(string(inm), f) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	rh.SetContentType(f.contentType)
	body := f.body
	if gz {
		rh.Set(fasthttp.HeaderContentEncoding, "gzip")
		body = f.gz
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.SetBodyRaw(body) // immutable for the handler's life
}

func setSecurityHeaders(rh *fasthttp.ResponseHeader) {
	rh.Set("Content-Security-Policy", csp)
	rh.Set("X-Content-Type-Options", "nosniff")
	rh.Set("Referrer-Policy", "no-referrer")
}

func (h *Handler) serveJSON(ctx *fasthttp.RequestCtx) {
	if !getOrHead(ctx) {
		return
	}
	b, err := h.encode()
	writeData(ctx, b, err)
}

// writeData answers one of the page's data calls: JSON, never cached.
func writeData(ctx *fasthttp.RequestCtx, b []byte, err error) {
	if err != nil {
		writeError(ctx, api.Internal.WithMessage(err.Error()))
		return
	}
	rh := &ctx.Response.Header
	rh.SetContentType("application/json")
	rh.Set(fasthttp.HeaderCacheControl, "no-store")
	setSecurityHeaders(rh)
	ctx.SetBody(b)
}

func (h *Handler) serveHistory(ctx *fasthttp.RequestCtx) {
	if !getOrHead(ctx) {
		return
	}
	since, rej := Since(ctx)
	if rej != nil {
		writeError(ctx, rej)
		return
	}
	b, err := json.Marshal(h.history.View(since))
	writeData(ctx, b, err)
}

var errSince = api.BadRequest.WithMessage("since: a unix time in milliseconds")

// Since reads a chart call's ?since=<unix ms> (0 when absent): only the
// seconds after it are asked for.
func Since(ctx *fasthttp.RequestCtx) (int64, *api.Rejection) {
	v := ctx.QueryArgs().Peek("since")
	if len(v) == 0 {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 {
		return 0, errSince
	}
	return n, nil
}

// encode calls the source and marshals its answer. A panicking source
// costs the request, never the edge: fasthttp does not recover panics, and
// a stream calls the source on its own goroutine.
func (h *Handler) encode() (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("dashboard source failed: %v", r)
		}
	}()
	s := h.source()
	// The page reads lists; null would need a special case there.
	if s.Products == nil {
		s.Products = []Product{}
	}
	if s.Filters == nil {
		s.Filters = []Filter{}
	}
	return json.Marshal(s)
}

// writeError answers from the error catalogue; the dashboard's answers
// also forbid content sniffing, like its pages.
func writeError(ctx *fasthttp.RequestCtx, rej *api.Rejection) {
	rej.Write(ctx)
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
}

// acceptsGzip reads Accept-Encoding (RFC 9110 12.5.3): gzip or x-gzip, else
// "*", with a non-zero weight; "gzip;q=0" is a refusal.
func acceptsGzip(ae []byte) bool {
	gzipQ, starQ := -1, -1
	for _, item := range strings.Split(string(ae), ",") {
		coding, params, _ := strings.Cut(item, ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		q := 1
		for _, p := range strings.Split(params, ";") {
			p = strings.TrimSpace(p)
			if v, ok := strings.CutPrefix(strings.ToLower(p), "q="); ok && strings.Trim(v, "0.") == "" {
				q = 0 // q=0, 0.0, 0.000 (a malformed q reads as 1: gzip is what every browser wants)
			}
		}
		switch coding {
		case "gzip", "x-gzip":
			gzipQ = max(gzipQ, q)
		case "*":
			starQ = q
		}
	}
	if gzipQ >= 0 {
		return gzipQ > 0
	}
	return starQ > 0
}

// etagMatches is If-None-Match's weak comparison: "*" matches, W/ is
// ignored, and either of the file's tags matches (both name its content).
func etagMatches(inm string, f *file) bool {
	for _, t := range strings.Split(inm, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == f.etag || t == f.etagGz {
			return true
		}
	}
	return false
}
