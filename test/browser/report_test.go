package browser

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"flashgate/internal/chtest"
	"flashgate/proxy/report"
	"flashgate/sale/room"
)

// TestSaleReport tells a real sale's story: a sale behind a waiting room
// drawn by lottery, on real Redis and a real ClickHouse order store.
// Twelve shoppers join the pre-queue; at the opening the lottery ranks them
// and the line lets them in; nine buy, one pays, the others' orders expire
// unpaid; three more find the sale degraded (503). The report — from the
// order store and the edge's timeline in Redis, after the sale — must hold
// exactly that, its lottery audit must pass, reconcile must be clean; the
// page opens in Chromium without a single request and is screenshotted.
// The dashboard's Sale report button fetches the same page.
func TestSaleReport(t *testing.T) {
	t.Parallel()
	ch := chtest.Start(t)
	start := time.Now().Add(4 * time.Second).Truncate(time.Second).Add(time.Second)
	item := fmt.Sprintf("  - {product_id: wr, name: \"Queued Drone\", price: \"9.90\", stock: 50, limit: 1, start: %q, end: %q, pay_timeout: 3s,\n"+
		"     waiting_room: {enabled: true, prequeue_opens: 1m, admit_per_minute: 600, session: 1m}}\n",
		start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339))
	e := startEdge(t, activities(item), fmt.Sprintf("clickhouse: {addr: %q}\n", ch))

	const shoppers, degraded = 12, 3
	tickets := make([]string, shoppers)
	user := func(i int) string { return fmt.Sprintf("queued-%d", i) }
	for i := range tickets {
		r := e.roomCall("POST", "/api/seckill/queue", user(i), "", map[string]string{"productId": "wr"})
		if r.Status != 200 || r.field("status") != "prequeue" || r.field("ticket") == "" {
			t.Fatalf("join %d: %v", i, r)
		}
		tickets[i] = r.field("ticket")
	}
	// The opening: every shopper polls until let in, then takes a token.
	tokens := make([]string, shoppers)
	deadline := time.Now().Add(30 * time.Second)
	for i := range tickets {
		for {
			r := e.roomCall("GET", "/api/seckill/queue?productId=wr", user(i), tickets[i], nil)
			if r.field("status") == "admitted" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("shopper %d not let in: %v", i, r)
			}
			time.Sleep(100 * time.Millisecond) // the line moves with the clock: polling is what a shopper does
		}
		r := e.roomCall("POST", "/api/seckill/token", user(i), tickets[i], map[string]string{"productId": "wr"})
		if r.Status != 200 || r.field("token") == "" {
			t.Fatalf("token %d: %v", i, r)
		}
		tokens[i] = r.field("token")
	}
	do := func(i int) apiResp {
		return e.request("POST", e.base+"/api/seckill/do", e.session(user(i)),
			map[string]any{"productId": "wr", "token": tokens[i], "quantity": 1})
	}
	var orders []string
	for i := range shoppers - degraded {
		r := do(i)
		if r.Status != 200 {
			t.Fatalf("buy %d: %v", i, r)
		}
		orders = append(orders, r.field("orderId"))
	}
	e.adminPost("/admin/degrade", map[string]any{"productId": "wr", "on": true})
	for i := shoppers - degraded; i < shoppers; i++ {
		if r := do(i); r.Status != 503 {
			t.Fatalf("a purchase while degraded: %v", r)
		}
	}
	time.Sleep(1500 * time.Millisecond) // the degraded stretch spans the edge's samples, second by second
	e.adminPost("/admin/degrade", map[string]any{"productId": "wr", "on": false})
	e.adminPost("/admin/orders/paid", map[string]any{"productId": "wr", "orderId": orders[0]})

	// After the sale: the other orders expire unpaid (3 s), the consumer
	// stores the releases; then the report.
	var rep report.Report
	var raw []byte
	deadline = time.Now().Add(40 * time.Second)
	for {
		r := e.request("GET", e.admin+"/admin/report?format=json&productId=wr", e.token, nil)
		if r.Status != 200 {
			t.Fatalf("report: %v", r)
		}
		raw = r.Body
		rep = report.Report{}
		if err := json.Unmarshal(raw, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Orders.ExpiredOrders == int64(len(orders)-1) && rep.Orders.PaidOrders == 1 && rep.Reconcile != nil && rep.Reconcile.Clean {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the report never showed 1 paid and %d expired with reconcile clean: %s", len(orders)-1, raw)
		}
		time.Sleep(500 * time.Millisecond) // waiting on the deadline sweep and the consumer: there is no event to await
	}
	sum := func(v []int64) (s int64) {
		for _, x := range v {
			s += x
		}
		return s
	}
	bought := int64(len(orders))
	if rep.Orders.Orders != bought || sum(rep.Sold) != bought || sum(rep.Paid) != 1 || sum(rep.Expired) != bought-1 {
		t.Errorf("orders %d, sold %d, paid %d, expired %d; want %d, %d, 1, %d", rep.Orders.Orders, sum(rep.Sold), sum(rep.Paid), sum(rep.Expired), bought, bought, bought-1)
	}
	if rep.Edges == nil {
		t.Fatalf("no edge timeline in the report: %s", raw)
	}
	if rep.Edges.Answers["200"] != uint64(bought) || rep.Edges.Answers["503"] != degraded || rep.Edges.Latency["p99"] <= 0 {
		t.Errorf("answers %v latency %v; want %d × 200, %d × 503", rep.Edges.Answers, rep.Edges.Latency, bought, degraded)
	}
	var kinds []string
	for _, s := range rep.Incidents {
		kinds = append(kinds, s.Kind)
	}
	if len(kinds) != 1 || kinds[0] != "degraded" {
		t.Errorf("incidents %v, want the one degraded stretch", rep.Incidents)
	}
	rm := rep.Room
	if rm == nil || rm.Lottery == nil {
		t.Fatalf("no room or lottery in the report: %s", raw)
	}
	if rm.Joined != shoppers || rm.Admitted < shoppers || rm.Waits.Counted != shoppers || rm.Waits.Max > 30 {
		t.Errorf("room joined %d admitted %d, waits %+v", rm.Joined, rm.Admitted, rm.Waits)
	}
	if a := rm.Lottery; !a.CommitOK || !a.RankOK || a.Checked != shoppers || room.Commit(a.Key) != a.Commit {
		t.Errorf("lottery audit %+v", a)
	}
	if p := rep.Reconcile.Product; p.ProductID != "wr" || p.Oversold+p.Lost+p.Duplicated != 0 {
		t.Errorf("reconcile %+v", p)
	}

	// The page: saved as a file, opened with no server at all.
	page := e.request("GET", e.admin+"/admin/report?productId=wr", e.token, nil)
	if page.Status != 200 || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("report page: %d %s", page.Status, page.Header.Get("Content-Type"))
	}
	if bytes.Contains(page.Body, []byte("http://")) || bytes.Contains(page.Body, []byte("https://")) || bytes.Contains(page.Body, []byte("<script")) {
		t.Error("the report page refers to something outside itself or runs a script")
	}
	file := filepath.Join(t.TempDir(), "report-wr.html")
	if err := os.WriteFile(file, page.Body, 0o644); err != nil {
		t.Fatal(err)
	}
	b := newTab(t, "report")
	b.do(chromedp.EmulateViewport(1280, 900))
	b.open("file://" + file)
	b.waitJS(5*time.Second, "the report drawn", `document.querySelectorAll('svg[data-chart]').length >= 6`)
	if v := b.text("audit-verdict"); !regexp.MustCompile(`^OK: the key matches its commitment, and all 12 places`).MatchString(v) {
		t.Errorf("audit verdict %q", v)
	}
	if c := eval[string](b, `document.getElementById('verdict-card').className + ' ' + document.querySelector('#verdict-card dd').textContent`); c != "card ok clean" {
		t.Errorf("reconcile card %q", c)
	}
	if n := eval[int](b, `document.querySelectorAll('svg path.ln').length`); n < 8 {
		t.Errorf("%d lines drawn, want the sold, answers, latency, payments and room lines", n)
	}
	if n := eval[int](b, `document.querySelectorAll('svg rect.inc.degraded').length`); n < 4 {
		t.Errorf("the degraded stretch is shaded on %d charts", n)
	}
	for _, r := range b.requests(0) {
		if !strings.HasPrefix(r.URL, "file://") {
			t.Errorf("the report page asked for %s", r.URL)
		}
	}
	b.keepShot("report")

	// The dashboard's button fetches the same report.
	d := newTab(t, "ops")
	d.do(chromedp.EmulateViewport(1280, 900))
	d.open(e.admin + "/admin/")
	d.waitJS(10*time.Second, "wr in the charts' sale list", `!!document.querySelector('#chart-product option[value=wr]')`)
	d.do(chromedp.SetValue(chromedp.ID("chart-product"), "wr"))
	d.do(chromedp.Evaluate[chromedp.Void](`document.getElementById('chart-product').dispatchEvent(new Event('change'))`))
	d.do(chromedp.Click(chromedp.ID("report-btn")))
	d.waitJS(30*time.Second, "the report saved", `document.getElementById('report-result').getAttribute('data-ok') === 'true'`)
	if s := d.text("report-result"); !regexp.MustCompile(`^Saved report-wr\.html \(\d+ KB\)\.$`).MatchString(s) {
		t.Errorf("report button says %q", s)
	}
}

// roomCall is a shopper's call with the queue ticket in its header.
func (e *edge) roomCall(method, path, user, ticket string, body any) apiResp {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+e.session(user))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if ticket != "" {
		req.Header.Set(room.Header, ticket)
	}
	res, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return apiResp{Status: res.StatusCode, Body: b, Header: res.Header}
}
