package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"flashgate/internal/redistest"
)

func post(t *testing.T, url, body string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAdminSaleActions(t *testing.T) {
	redis := redistest.Start(t)
	origin := startOrigin(t)
	token := "admin-token-0123456789abcdef"
	cfg := fmt.Sprintf(baseConfig, "100r/s", 100, origin) + fmt.Sprintf(`
redis:
  addr: "%s"
activities:
  - product_id: p1
    name: "Flash Sneaker"
    price: "99.00"
    stock: 10
    limit: 1
    start: "+0s"
    end: "+1h"
`, redis)
	cfg = strings.Replace(cfg, "admin:\n  addr: \"127.0.0.1:0\"", "admin:\n  addr: \"127.0.0.1:0\"\n  token: \""+token+"\"", 1)
	e := startEdge(t, cfg)
	auth := []string{"Authorization", "Bearer " + token}

	// Without the token nothing changes.
	if code, _ := post(t, e.adminBase+"/admin/restock", `{"productId":"p1","add":5}`); code != 401 {
		t.Fatalf("restock without token: %d", code)
	}
	if code, _ := post(t, e.adminBase+"/admin/restock", `{"productId":"p1","add":5}`, "Authorization", "Bearer forged-forged-forged-forged"); code != 401 {
		t.Fatalf("restock with a forged token: %d", code)
	}

	bad := []struct{ path, body, want string }{
		{"/admin/restock", `{"productId":"p1","add":-5}`, "add"},
		{"/admin/restock", `{"productId":"p1/../x","add":5}`, "productId"},
		{"/admin/restock", `{"productId":"p1","add":5,"extra":1}`, "unknown field"},
		{"/admin/restock", `not json`, "malformed"},
		{"/admin/activities", `{"productId":"p9","name":"X","price":"1.00","stock":5,"limit":1,"start":"+1h","end":"+0s"}`, "end"},
		{"/admin/activities", `{"productId":"bad id!","name":"X","price":"1.00","stock":5,"limit":1,"start":"+0s","end":"+1h"}`, "product_id"},
		{"/admin/activities", `{"productId":"p9","name":"X","price":"-1","stock":5,"limit":1,"start":"+0s","end":"+1h"}`, "price"},
		{"/admin/degrade", `{"productId":"p1"}`, "on"},
	}
	for _, b := range bad {
		code, body := post(t, e.adminBase+b.path, b.body, auth...)
		if code != 400 || !strings.Contains(body, b.want) {
			t.Errorf("%s %s: %d %s", b.path, b.body, code, body)
		}
	}
	if n, _, _ := e.srv.Store().Remaining(t.Context(), "p1"); n != 10 {
		t.Fatalf("bad requests changed stock: %d", n)
	}
	if _, ok := e.srv.env.Sales.GetString("p9"); ok {
		t.Fatal("an invalid activity was created")
	}

	if code, body := post(t, e.adminBase+"/admin/restock", `{"productId":"p1","add":5}`, auth...); code != 200 || !strings.Contains(body, `"stock":15`) {
		t.Fatalf("restock: %d %s", code, body)
	}
	if code, body := post(t, e.adminBase+"/admin/restock", `{"productId":"nosuch","add":5}`, auth...); code != 404 {
		t.Fatalf("restock of an unknown sale: %d %s", code, body)
	}
	code, body := post(t, e.adminBase+"/admin/activities", `{"productId":"p3","name":"New","price":"5.50","stock":7,"limit":2,"start":"+0s","end":"+1h"}`, auth...)
	if code != 200 {
		t.Fatalf("create: %d %s", code, body)
	}
	code, _, body = get(t, e.base+"/api/seckill/status?productId=p3")
	if code != 200 || !strings.Contains(body, `"remaining":7`) || !strings.Contains(body, `"price":"5.50"`) {
		t.Fatalf("status of the created sale: %d %s", code, body)
	}
	if code, body := post(t, e.adminBase+"/admin/degrade", `{"productId":"p3","on":true}`, auth...); code != 200 {
		t.Fatalf("degrade: %d %s", code, body)
	}
	_, _, list := get(t, e.adminBase+"/admin/activities", auth...)
	var items []map[string]any
	if err := json.Unmarshal([]byte(list), &items); err != nil || len(items) != 2 {
		t.Fatalf("list: %v %s", err, list)
	}
	if items[1]["productId"] != "p3" || items[1]["degraded"] != true || items[0]["stock"] != float64(15) {
		t.Fatalf("list: %s", list)
	}
}

// An error answer replaces the whole response, so the headers that go with
// it are set after it.
func TestAdminErrorsKeepTheirHeaders(t *testing.T) {
	origin := startOrigin(t)
	token := "admin-token-0123456789abcdef"
	cfg := strings.Replace(fmt.Sprintf(baseConfig, "100r/s", 100, origin), "admin:\n  addr: \"127.0.0.1:0\"", "admin:\n  addr: \"127.0.0.1:0\"\n  token: \""+token+"\"", 1)
	e := startEdge(t, cfg)
	code, hdr, body := get(t, e.adminBase+"/metrics")
	if code != 401 || hdr.Get("WWW-Authenticate") != `Bearer realm="flashgate-admin"` || !strings.Contains(body, "UNAUTHENTICATED") {
		t.Fatalf("without the token: %d %q %s", code, hdr.Get("WWW-Authenticate"), body)
	}
	for _, path := range []string{"/admin/reload", "/admin/restock"} {
		code, hdr, _ := get(t, e.adminBase+path, "Authorization", "Bearer "+token)
		if code != 405 || hdr.Get("Allow") != "POST" {
			t.Fatalf("GET %s: %d, Allow %q", path, code, hdr.Get("Allow"))
		}
	}
}
