package api

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"
)

// catalogue reads errors.go: every newRejection(status, code, message)
// call with literal arguments, by variable name.
func catalogue(t *testing.T) map[string][3]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][3]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, v := range vs.Values {
			call, ok := v.(*ast.CallExpr)
			if !ok || len(call.Args) != 3 {
				t.Errorf("%s: not a newRejection(status, code, message)", vs.Names[i].Name)
				continue
			}
			var lit [3]string
			for j, a := range call.Args {
				bl, ok := a.(*ast.BasicLit)
				if !ok {
					t.Errorf("%s: argument %d is not a literal", vs.Names[i].Name, j)
					continue
				}
				lit[j] = bl.Value
				if bl.Kind == token.STRING {
					lit[j], _ = strconv.Unquote(bl.Value)
				}
			}
			out[vs.Names[i].Name] = lit
		}
		return false
	})
	return out
}

func TestCatalogueDefinesEachAnswerOnce(t *testing.T) {
	entries := catalogue(t)
	if len(entries) < 30 {
		t.Fatalf("read %d entries from errors.go", len(entries))
	}
	code := regexp.MustCompile(`^[A-Z]+(_[A-Z]+)*$`)
	seen := map[[3]string]string{}
	for name, e := range entries {
		if other, dup := seen[e]; dup {
			t.Errorf("%s and %s are the same answer %v", name, other, e)
		}
		seen[e] = name
		if st, _ := strconv.Atoi(e[0]); st < 400 || st > 599 {
			t.Errorf("%s: status %s is not an error", name, e[0])
		}
		if !code.MatchString(e[1]) || e[2] == "" {
			t.Errorf("%s: code %q, message %q", name, e[1], e[2])
		}
	}
}

func TestBodyIsCodeAndMessage(t *testing.T) {
	for _, rej := range []*Rejection{RateLimited, AdminDegradeUsage, BadUserID, HeadersTooLarge} {
		var got struct{ Code, Message string }
		if err := json.Unmarshal(rej.Body, &got); err != nil || got.Code != rej.Code || got.Message != rej.Message {
			t.Errorf("%s: body %s (%v)", rej.Code, rej.Body, err)
		}
	}
	if string(RateLimited.Body) != `{"code":"RATE_LIMITED","message":"too many requests"}` {
		t.Errorf("body %s", RateLimited.Body)
	}
	b := append(OrderUnconfirmed.AppendOpen(nil), `,"orderId":"7"}`...)
	if string(b) != `{"code":"DEGRADED","message":"your order is being confirmed, check its result","orderId":"7"}` {
		t.Errorf("AppendOpen: %s", b)
	}
}

func TestWithStatusAndMessage(t *testing.T) {
	if RateLimited.WithStatus(429) != RateLimited {
		t.Error("the same status must give the entry itself")
	}
	r := RateLimited.WithStatus(503)
	if r.Status != 503 || r.Code != RateLimited.Code || string(r.Body) != string(RateLimited.Body) || RateLimited.Status != 429 {
		t.Errorf("WithStatus: %+v, entry now %d", r, RateLimited.Status)
	}
	m := BadRequest.WithMessage(`bad "x"`)
	if m.Status != 400 || m.Code != "BAD_REQUEST" || string(m.Body) != `{"code":"BAD_REQUEST","message":"bad \"x\""}` || BadRequest.Message != "malformed request" {
		t.Errorf("WithMessage: %+v %s", m, m.Body)
	}
}

func TestWriteAllocs(t *testing.T) {
	var ctx fasthttp.RequestCtx
	ctx.Response.Header.Set("X-Stale", "1")
	Busy.Write(&ctx)
	if ctx.Response.StatusCode() != 503 || string(ctx.Response.Body()) != string(Busy.Body) ||
		string(ctx.Response.Header.ContentType()) != "application/json" ||
		string(ctx.Response.Header.Peek("Cache-Control")) != "no-store" || len(ctx.Response.Header.Peek("X-Stale")) != 0 {
		t.Fatalf("response %s", ctx.Response.String())
	}
	if n := testing.AllocsPerRun(1000, func() { SoldOut.Write(&ctx) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// TestWriteJSONAllocs: the one writer of JSON answers keeps what the
// response holds (a cookie set before it), sets the status it is given and
// no caching, and allocates nothing.
func TestWriteJSONAllocs(t *testing.T) {
	var ctx fasthttp.RequestCtx
	ctx.Response.Header.Set("X-Kept", "1")
	body := []byte(`{"ok":true}`)
	WriteJSON(&ctx, 201, body)
	if ctx.Response.StatusCode() != 201 || string(ctx.Response.Body()) != string(body) ||
		string(ctx.Response.Header.ContentType()) != "application/json" ||
		string(ctx.Response.Header.Peek("Cache-Control")) != "no-store" || string(ctx.Response.Header.Peek("X-Kept")) != "1" {
		t.Fatalf("response %s", ctx.Response.String())
	}
	if n := testing.AllocsPerRun(1000, func() { WriteJSON(&ctx, 200, body) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
