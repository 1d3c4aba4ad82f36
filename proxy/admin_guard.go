package proxy

import (
	"net/netip"
	"strings"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/sale/api"
)

// The admin listener's defence against web pages. A browser on the
// operator's machine reaches the loopback admin listener too, so without
// these checks any page it opens could drive it:
//
//   - A cross-site form (enctype text/plain, body `{"productId":"p1","on":true}=`)
//     or a no-cors fetch changes state without a CORS preflight. Requiring
//     Content-Type: application/json on every state-changing call makes the
//     browser preflight it, which this listener never grants.
//   - DNS rebinding points the attacker's own name at 127.0.0.1, so its page
//     reads our answers as same-origin. Its requests carry that name in
//     Host: only IP addresses, localhost and the names in admin.hosts are
//     answered. An IP address cannot be rebound (a page's origin is then
//     that address, which is us), so any is accepted, whatever the port:
//     tunnels, port mappings and every interface of a 0.0.0.0 listener
//     keep working.
//   - An Origin header, when a browser sends one, must be the Host the
//     request names: the dashboard's own calls are same-origin.
//
// The health probes stay open (they tell nothing); the token rules apply
// after these checks.

// refuseFromWeb returns the rejection for a request a web page could have
// made on the operator's behalf, or nil.
func refuseFromWeb(ctx *fasthttp.RequestCtx, admin *conf.AdminConfig) *api.Rejection {
	host := string(ctx.Host())
	if !adminHostAllowed(host, admin) {
		return api.AdminHostRefused
	}
	if !ctx.IsGet() && !ctx.IsHead() && !isJSON(ctx.Request.Header.ContentType()) {
		return api.AdminNeedsJSON
	}
	if origin := ctx.Request.Header.Peek("Origin"); len(origin) > 0 && !sameOrigin(string(origin), host) {
		return api.AdminOriginRefused
	}
	return nil
}

// adminHostAllowed reports whether a Host header names this listener.
func adminHostAllowed(hostHeader string, admin *conf.AdminConfig) bool {
	h := strings.TrimSuffix(strings.ToLower(hostOnly(hostHeader)), ".")
	if h == "" {
		return false
	}
	if _, err := netip.ParseAddr(h); err == nil || h == "localhost" {
		return true
	}
	return admin.AllowedHost(h)
}

// hostOnly strips the port of a Host header ("[::1]:9901" -> "::1").
func hostOnly(h string) string {
	if rest, ok := strings.CutPrefix(h, "["); ok {
		if i := strings.IndexByte(rest, ']'); i >= 0 {
			return rest[:i]
		}
		return h
	}
	if strings.Count(h, ":") == 1 {
		return h[:strings.IndexByte(h, ':')]
	}
	return h
}

// sameOrigin reports whether an Origin header is the origin of a page
// served under host (scheme http or https: a TLS proxy may sit in front).
func sameOrigin(origin, host string) bool {
	for _, scheme := range []string{"http://", "https://"} {
		if rest, ok := strings.CutPrefix(strings.ToLower(origin), scheme); ok {
			return strings.EqualFold(rest, host)
		}
	}
	return false // "null" (a sandboxed frame, a file) included
}

// isJSON reports whether a Content-Type is application/json (parameters
// such as charset allowed).
func isJSON(ct []byte) bool {
	mt, _, _ := strings.Cut(string(ct), ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}
