package proxy

import (
	"net/http/pprof"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"flashgate/sale/api"
)

// The Go profiler on the admin listener, so that a slow edge in production
// can be profiled as it runs, without a special build or the -pprof
// listener (which has no authentication and so only takes loopback). It is
// an admin path like any other: handleAdmin sends it through the web-page
// guard and the admin token before it gets here, and only GET and HEAD are
// answered (a profile changes nothing, but takes CPU for as long as asked).
//
// Exposed: the index, profile (CPU, ?seconds=1..maxProfileSeconds, default
// 30), trace (same bound), and the runtime's named profiles: heap, allocs,
// goroutine, block, mutex, threadcreate. block and mutex are empty unless
// the edge samples them (-pprof with -block-rate; the mutex fraction is
// never set): sampling them costs every blocking call, the hot path's too.
//
// Not exposed: cmdline, whose arguments are the one thing here that can
// carry a secret (a wrapper passing a password as a flag), and which a
// profile does not need; and symbol, which resolves addresses for old
// profile formats: every profile served here carries its symbols.

// maxProfileSeconds bounds a CPU profile or a trace: the request holds a
// goroutine and the profiler (one at a time) for that long.
const maxProfileSeconds = 300

// debugPrefix is the profiler's path on the admin listener.
const debugPrefix = "/debug/pprof/"

// debugProfiles are the runtime's named profiles served as they are.
var debugProfiles = []string{"allocs", "block", "goroutine", "heap", "mutex", "threadcreate"}

var debugHandlers = func() map[string]fasthttp.RequestHandler {
	m := map[string]fasthttp.RequestHandler{
		"profile": fasthttpadaptor.NewFastHTTPHandlerFunc(pprof.Profile),
		"trace":   fasthttpadaptor.NewFastHTTPHandlerFunc(pprof.Trace),
	}
	for _, name := range debugProfiles {
		m[name] = fasthttpadaptor.NewFastHTTPHandler(pprof.Handler(name))
	}
	return m
}()

// debugIndex is the index page: the exposed profiles only (net/http/pprof's
// own index would link cmdline).
var debugIndex = func() string {
	var b strings.Builder
	b.WriteString("<!DOCTYPE html><html><head><title>flashgate /debug/pprof/</title></head><body><h1>flashgate /debug/pprof/</h1><ul>\n")
	for _, name := range append([]string{"profile?seconds=30", "trace?seconds=5"}, debugProfiles...) {
		b.WriteString(`<li><a href="` + name + `">` + name + "</a></li>\n")
	}
	b.WriteString("</ul><p>With a token: curl -H 'Authorization: Bearer TOKEN' -o cpu.pprof 'http://ADMIN/debug/pprof/profile?seconds=30'; go tool pprof cpu.pprof</p></body></html>\n")
	return b.String()
}()

// handleDebug serves path under /debug/pprof/ and reports whether it was
// one of its paths. The caller has checked the guard and the token.
func (s *Server) handleDebug(ctx *fasthttp.RequestCtx, path string) bool {
	name, ok := strings.CutPrefix(path, debugPrefix)
	if !ok {
		if path != strings.TrimSuffix(debugPrefix, "/") {
			return false
		}
		ctx.Redirect(debugPrefix, fasthttp.StatusMovedPermanently)
		return true
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		api.MethodNotAllowed.Write(ctx)
		ctx.Response.Header.Set(fasthttp.HeaderAllow, "GET, HEAD")
		return true
	}
	if name == "" {
		ctx.SetContentType("text/html; charset=utf-8")
		ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
		ctx.SetBodyString(debugIndex)
		return true
	}
	h, ok := debugHandlers[name]
	if !ok {
		api.NotFound.WithMessage("no such profile here (cmdline and symbol are not served): see " + debugPrefix).Write(ctx)
		return true
	}
	if name == "profile" || name == "trace" {
		if v := ctx.QueryArgs().Peek("seconds"); len(v) > 0 {
			if n, err := strconv.Atoi(string(v)); err != nil || n < 1 || n > maxProfileSeconds {
				api.BadRequest.WithMessage("seconds must be a whole number from 1 to " + strconv.Itoa(maxProfileSeconds)).Write(ctx)
				return true
			}
		}
	}
	s.log.Info("admin action", "action", "pprof", "profile", name, "query", string(ctx.QueryArgs().QueryString()), "remote", ctx.RemoteIP().String())
	h(ctx)
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	return true
}
