package proxy

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"net/url"
	"strings"

	"github.com/valyala/fasthttp"
	"gopkg.in/yaml.v3"

	"flashgate/proxy/dashboard"
	"flashgate/sale/api"
)

// handleAdmin serves the operator listener. It is bound to loopback by
// default; when a token is configured every path but the health probes
// requires it, and config validation refuses a non-loopback address without
// one.
func (s *Server) handleAdmin(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	switch path {
	case "/healthz":
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetBodyString("ok\n")
		return
	case "/readyz":
		ctx.SetContentType("text/plain; charset=utf-8")
		if s.draining.Load() {
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			ctx.SetBodyString("draining\n")
			return
		}
		ctx.SetBodyString("ready\n")
		return
	}
	snap := s.snap.Load()
	// The dashboard page and its assets hold no data and must load in a
	// browser, which cannot send the token; its data calls need it.
	if dashboard.IsPublic(ctx.Path()) {
		s.dash.Serve(ctx)
		return
	}
	if !authorized(ctx, snap.AdminToken) {
		api.AdminTokenRequired.Write(ctx)
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="flashgate-admin"`)
		s.log.Warn("admin request refused: bad or missing token", "path", path, "remote", ctx.RemoteIP().String())
		return
	}
	switch path {
	case "/metrics":
		ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		s.m.reg.WriteTo(ctx)
	case "/admin/reload":
		if !ctx.IsPost() {
			api.MethodNotAllowed.Write(ctx)
			ctx.Response.Header.Set(fasthttp.HeaderAllow, "POST")
			return
		}
		s.log.Info("admin action", "action", "reload", "remote", ctx.RemoteIP().String())
		err := s.Reload("admin")
		res := s.LastReload()
		if err != nil {
			ctx.SetStatusCode(fasthttp.StatusUnprocessableEntity)
		}
		writeJSON(ctx, res)
	case "/admin/config":
		out, err := s.RedactedConfig()
		if err != nil {
			ctx.Error(err.Error(), fasthttp.StatusInternalServerError)
			return
		}
		ctx.SetContentType("application/yaml; charset=utf-8")
		ctx.SetBody(out)
	default:
		if !s.dash.Serve(ctx) && !s.handleAdminSale(ctx, path) && !s.handleAdminOrders(ctx, path) {
			api.NotFound.Write(ctx)
		}
	}
}

func authorized(ctx *fasthttp.RequestCtx, token string) bool {
	if token == "" {
		return true
	}
	got, ok := strings.CutPrefix(string(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func writeJSON(ctx *fasthttp.RequestCtx, v any) {
	ctx.SetContentType("application/json")
	b, _ := json.Marshal(v)
	ctx.SetBody(b)
}

// RedactedConfig renders the running configuration as YAML with every value
// whose key names a secret replaced, so it can be pasted into a ticket.
func (s *Server) RedactedConfig() ([]byte, error) {
	snap := s.snap.Load()
	var root yaml.Node
	if err := root.Encode(snap.Doc.Config); err != nil {
		return nil, err
	}
	redact(&root)
	head := "# flashgate running configuration, version " + itoa(snap.Version) + ", from " + snap.Doc.Source + "; secrets redacted\n"
	b, err := yaml.Marshal(&root)
	return append([]byte(head), b...), err
}

func redact(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode {
		n.Value = redactURL(n.Value)
		return
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if isSecretKey(k.Value) && v.Kind == yaml.ScalarNode && v.Value != "" && !strings.HasPrefix(v.Value, "env:") {
				v.Value, v.Tag, v.Style = "REDACTED", "!!str", 0
				continue
			}
			redact(v)
		}
		return
	}
	for _, c := range n.Content {
		redact(c)
	}
}

// redactURL hides the password of a URL under any key
// (redis://user:pw@host). One that does not parse loses everything up to
// its last @: better too much hidden than a password shown.
func redactURL(v string) string {
	i := strings.Index(v, "://")
	if i <= 0 {
		return v
	}
	if u, err := url.Parse(v); err == nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "REDACTED")
			return u.String()
		}
		return v
	}
	if at := strings.LastIndexByte(v, '@'); at > i {
		return v[:i+3] + "REDACTED" + v[at:]
	}
	return v
}

func isSecretKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"secret", "token", "password", "secrets"} {
		if k == s || strings.HasSuffix(k, "_"+s) {
			return true
		}
	}
	return false
}

func itoa(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}
