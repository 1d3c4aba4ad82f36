package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/internal/redistest"
)

// admin POSTs a JSON body to the edge's admin listener.
func (e *edge) adminPost(path, body string) resp {
	e.t.Helper()
	var req fasthttp.Request
	var res fasthttp.Response
	req.Header.SetMethod("POST")
	req.SetRequestURI("http://" + e.admin + path)
	req.Header.SetContentType("application/json")
	req.SetBodyString(body)
	if err := fasthttp.DoTimeout(&req, &res, 5*time.Second); err != nil {
		e.t.Fatalf("admin %s: %v", path, err)
	}
	return resp{status: res.StatusCode(), body: append([]byte(nil), res.Body()...)}
}

// TestAdminDegradeSwitch: POST /admin/degrade turns one product's sale (or
// all) into 503 DEGRADED at the edge, without touching its stock, and
// lifting it restores the sale.
func TestAdminDegradeSwitch(t *testing.T) {
	r := redistest.New(t)
	rd := openRedis(t, r.Addr())
	e := startEdge(t, r.Addr(), activities(sale("d1", 10, 5), sale("d2", 10, 5)))
	j := newJWTs(t, sessionSecret)
	jwt := j.get("shopper")

	expect := func(t *testing.T, product string, status int, code string) {
		t.Helper()
		// A token minted before the switch, used after it, and a new one.
		stock0, outbox0 := rd.stock(product), rd.orderCount(product)
		res, err := e.attempt(jwt, product, 1)
		if err != nil || res.status != status || (code != "" && res.code() != code) {
			t.Errorf("%s: %v %v, want %d %s", product, res, err, status, code)
		}
		if status != 200 {
			if s, n := rd.stock(product), rd.orderCount(product); s != stock0 || n != outbox0 {
				t.Errorf("%s: stock %d -> %d, outbox %d -> %d while degraded", product, stock0, s, outbox0, n)
			}
		}
	}
	switchOn := func(t *testing.T, product string, on bool) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"productId": product, "on": on})
		if res := e.adminPost("/admin/degrade", string(b)); res.status != 200 {
			t.Fatalf("POST /admin/degrade %s: %v", b, res)
		}
	}

	expect(t, "d1", 200, "")
	_, held, _ := e.token(jwt, "d1") // minted while open

	switchOn(t, "d1", true)
	if v := e.metric(`flashgate_sale_degraded{product="d1"}`); v != 1 {
		t.Errorf("flashgate_sale_degraded{product=\"d1\"} = %v, want 1", v)
	}
	expect(t, "d1", 503, "DEGRADED")
	calls0 := e.metric(`flashgate_redis_script_calls_total{what="calls"}`)
	if res, _ := e.buy(jwt, "d1", held, 1); res.status != 503 || res.code() != "DEGRADED" {
		t.Errorf("do with a token minted before the switch: %v, want 503 DEGRADED", res)
	}
	if calls := e.metric(`flashgate_redis_script_calls_total{what="calls"}`); calls != calls0 {
		t.Errorf("a degraded do made %v script calls", calls-calls0)
	}
	expect(t, "d2", 200, "") // the other product is untouched

	switchOn(t, "d1", false)
	expect(t, "d1", 200, "")
	if res, _ := e.buy(jwt, "d1", held, 1); res.status != 200 {
		t.Errorf("the token held through the switch: %v, want 200 (a degraded do must not burn it)", res)
	}

	switchOn(t, "", true)
	expect(t, "d1", 503, "DEGRADED")
	expect(t, "d2", 503, "DEGRADED")
	switchOn(t, "", false)
	expect(t, "d2", 200, "")
}
