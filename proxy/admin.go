package proxy

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
	"gopkg.in/yaml.v3"

	"flashgate/conf"
	"flashgate/proxy/dashboard"
	"flashgate/sale/api"
)

// handleAdmin serves the operator listener. It is bound to loopback by
// default; when a token is configured every path but the health probes
// requires it, and config validation refuses a non-loopback address without
// one. Before the token, every path but the probes refuses what a web page
// could send (admin_guard.go).
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
	if rej := refuseFromWeb(ctx, &snap.Doc.Config.Admin); rej != nil {
		rej.Write(ctx)
		s.log.Warn("admin request refused: it could come from a web page", "path", path, "method", string(ctx.Method()), "remote", ctx.RemoteIP().String(), "why", rej.Message)
		return
	}
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
		if !s.requirePost(ctx) {
			return
		}
		s.log.Info("admin action", "action", "reload", "remote", ctx.RemoteIP().String())
		status := fasthttp.StatusOK
		if err := s.Reload("admin"); err != nil {
			status = fasthttp.StatusUnprocessableEntity
		}
		api.WriteJSON(ctx, status, jsonOf(s.LastReload()))
	case "/admin/cache/purge":
		s.purgeCache(ctx)
	case "/admin/config":
		out, err := s.RedactedConfig()
		if err != nil {
			api.Internal.WithMessage(err.Error()).Write(ctx)
			return
		}
		ctx.SetContentType("application/yaml; charset=utf-8")
		ctx.SetBody(out)
	default:
		if !s.dash.Serve(ctx) && !s.handleDebug(ctx, path) && !s.handleAdminSale(ctx, path) && !s.handleAdminOrders(ctx, path) && !s.handleCharts(ctx, path) && !s.handleAdminRooms(ctx, path) {
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

// jsonOf is v as the body of an operator's answer (api.WriteJSON writes
// it); the admin answers are maps and structs of plain values, which
// always marshal.
func jsonOf(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// RedactedConfig renders the running configuration as YAML with every
// secret hidden, so it can be pasted into a ticket: see renderConfig.
func (s *Server) RedactedConfig() ([]byte, error) {
	snap := s.snap.Load()
	b, err := renderConfig(snap.Doc.Config)
	head := "# flashgate running configuration, version " + itoa(snap.Version) + ", from " + snap.Doc.Source + "; secrets redacted\n"
	return append([]byte(head), b...), err
}

// redactedMark replaces every secret value in /admin/config.
const redactedMark = "REDACTED"

// renderConfig is cfg as YAML with its secrets hidden by structure, not by
// the name of a key: every field conf tags `secret:"true"` (a string, or
// each item of a list, at any depth) shows "REDACTED", its env:NAME
// reference, or "" when unset; every URL in any other string loses its
// userinfo. Each filter shows its effective enabled flag and its own
// settings. Nothing of cfg is modified.
func renderConfig(cfg *conf.Config) ([]byte, error) {
	c := redactedCopy(reflect.ValueOf(cfg).Elem(), false).Interface().(conf.Config)
	for i, f := range cfg.Filters {
		on := f.Enabled == nil || *f.Enabled
		c.Filters[i].Enabled = &on
	}
	var root yaml.Node
	if err := root.Encode(&c); err != nil {
		return nil, err
	}
	if seq := mappingValue(&root, "filters"); seq != nil && seq.Kind == yaml.SequenceNode {
		for i, item := range seq.Content {
			if i < len(cfg.Filters) {
				appendFilterParams(item, cfg.Filters[i].Node)
			}
		}
	}
	return yaml.Marshal(&root)
}

// redactedCopy deep-copies v, hiding secrets on the way: secret says a
// field on the path to v is tagged secret.
func redactedCopy(v reflect.Value, secret bool) reflect.Value {
	out := reflect.New(v.Type()).Elem()
	switch v.Kind() {
	case reflect.String:
		if secret {
			out.SetString(maskSecret(v.String()))
		} else {
			out.SetString(redactURLs(v.String()))
		}
	case reflect.Struct:
		out.Set(v) // unexported fields, which YAML does not show either
		t := v.Type()
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				out.Field(i).Set(redactedCopy(v.Field(i), secret || f.Tag.Get("secret") == "true"))
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice {
			if v.IsNil() {
				return out
			}
			out = reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		}
		for i := range v.Len() {
			out.Index(i).Set(redactedCopy(v.Index(i), secret))
		}
	case reflect.Map:
		if v.IsNil() {
			return out
		}
		out = reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(redactedCopy(it.Key(), false), redactedCopy(it.Value(), secret))
		}
	case reflect.Pointer:
		// A filter's own settings (a *yaml.Node, not shown by yaml) are
		// rendered by appendFilterParams.
		if v.IsNil() || v.Type() == yamlNodePtr {
			return out
		}
		out.Set(reflect.New(v.Type().Elem()))
		out.Elem().Set(redactedCopy(v.Elem(), secret))
	case reflect.Interface:
		if !v.IsNil() {
			out.Set(redactedCopy(v.Elem(), secret))
		}
	default:
		// A number or a flag tagged secret shows its zero value.
		if !secret {
			out.Set(v)
		}
	}
	return out
}

var yamlNodePtr = reflect.TypeOf((*yaml.Node)(nil))

// maskSecret hides a secret but says whether it is set and where it comes
// from: an env:NAME reference names a variable, not its value.
func maskSecret(v string) string {
	if v == "" || strings.HasPrefix(v, "env:") {
		return v
	}
	return redactedMark
}

// redactURLs replaces the userinfo of every URL in v (redis://user:pw@host,
// also inside a list or a sentence) with REDACTED. A URL runs from its
// scheme to the next space or comma, and its userinfo to its last '@': a
// password with an unescaped '/' or '@' is hidden too; a path holding an
// '@' hides a little more than needed. Better too much hidden than a
// password shown.
func redactURLs(v string) string {
	for i := 0; ; {
		j := strings.Index(v[i:], "://")
		if j < 0 {
			return v
		}
		start := i + j + len("://")
		end := len(v)
		if k := strings.IndexAny(v[start:], " \t\r\n,;"); k >= 0 {
			end = start + k
		}
		if at := strings.LastIndexByte(v[start:end], '@'); at >= 0 {
			v = v[:start] + redactedMark + v[start+at:]
			end = start + len(redactedMark) + (end - start - at)
		}
		i = end
	}
}

// appendFilterParams adds a filter's own settings (rate, burst, rules, ...)
// from the YAML it was written as to its rendered mapping, deep-copied.
// The filter registry is open, so conf keeps these untyped and their
// structure is unknown here: values under a key that names a secret are
// hidden (no filter has one today), URLs lose their userinfo.
func appendFilterParams(item, params *yaml.Node) {
	if item.Kind != yaml.MappingNode || params == nil || params.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(params.Content); i += 2 {
		k, v := params.Content[i], params.Content[i+1]
		if mappingValue(item, k.Value) != nil {
			continue // a common key, rendered from FilterConfig
		}
		item.Content = append(item.Content, cloneNode(k), redactNode(cloneNode(v), secretParamKey(k.Value)))
	}
}

// secretParamKey is the fallback for untyped settings only.
func secretParamKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"secret", "token", "password", "passwd", "key", "credential"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// redactNode hides every scalar under n when secret, else the userinfo of
// its URLs; nested mappings apply secretParamKey to their own keys.
func redactNode(n *yaml.Node, secret bool) *yaml.Node {
	switch n.Kind {
	case yaml.ScalarNode:
		if secret {
			if m := maskSecret(n.Value); m != n.Value {
				n.Value, n.Tag, n.Style = m, "!!str", 0
			}
		} else if r := redactURLs(n.Value); r != n.Value {
			n.Value, n.Style = r, 0
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			redactNode(n.Content[i+1], secret || secretParamKey(n.Content[i].Value))
		}
	default:
		for _, c := range n.Content {
			redactNode(c, secret)
		}
	}
	return n
}

// cloneNode deep-copies a YAML tree (aliases resolved), so rendering never
// touches the snapshot's document.
func cloneNode(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return cloneNode(n.Alias)
	}
	c := *n
	c.Anchor, c.Alias = "", nil
	c.HeadComment, c.LineComment, c.FootComment = "", "", ""
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = cloneNode(k)
	}
	return &c
}

// mappingValue is the value under key in mapping m, or nil.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m.Kind == yaml.DocumentNode && len(m.Content) > 0 {
		m = m.Content[0]
	}
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func itoa(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// purgeCache drops stored answers of the route microcaches:
// POST /admin/cache/purge {"route": "shop.example/products/", "prefix":
// "GET|shop.example|/products/a"}. route is a cached route's label on
// /metrics ("" or absent: every cached route); prefix is the start of the
// keys to drop, each key read as its parts in order, each followed by '|'
// ("" or absent: all of them). One of the two is required, so that an empty
// call cannot empty every cache by mistake; {"route": "", "prefix": ""}
// cannot either. It answers {"purged": n}.
func (s *Server) purgeCache(ctx *fasthttp.RequestCtx) {
	if !s.requirePost(ctx) {
		return
	}
	var req struct {
		Route  string `json:"route"`
		Prefix string `json:"prefix"`
	}
	if rej := decodeAdmin(ctx, &req); rej != nil {
		rej.Write(ctx)
		return
	}
	if req.Route == "" && req.Prefix == "" {
		api.AdminPurgeUsage.Write(ctx)
		return
	}
	s.audit(ctx, "cache_purge", "route", req.Route, "prefix", req.Prefix)
	n, found := s.env.Upstreams.Purge(req.Route, req.Prefix)
	if !found {
		api.NotFound.WithMessage("no cached route " + strconv.Quote(req.Route)).Write(ctx)
		return
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(map[string]any{"ok": true, "purged": n}))
}
