package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"flashgate/internal/edgetest"
	"flashgate/proxy/report"
	"flashgate/sale/session"
)

const reportSecret = "report-session-secret-0123456789abcdef"

// TestReportSubcommand: `proxy report` against an edge on the embedded
// stand-ins (which only the running edge reaches: the command asks its
// admin listener) writes the sale's page and JSON with the orders the edge
// took; bad input is refused with the usage (exit 2) and nothing written,
// an unknown sale is an error (exit 1) and nothing written.
func TestReportSubcommand(t *testing.T) {
	dir := t.TempDir()
	edgeCfg := edgetest.WriteConfig(t, fmt.Sprintf(`
listen: {addr: "127.0.0.1:0"}
admin: {addr: "127.0.0.1:0"}
log: {level: warn, access_sample: 0}
reload: {watch: false}
data_dir: %q
auth: {secrets: [%q]}
sale: {token_secret: "report-token-secret-0123456789abcdefgh"}
orders: {consumer: true, batch_time: 10ms}
filters:
  - {type: session}
  - {type: sale_window}
  - {type: purchase_token}
activities:
  - {product_id: p1, name: Drone, price: "5.00", stock: 10, limit: 1, start: "+0s", end: "+1h"}
`, filepath.Join(dir, "data"), reportSecret))
	ed := edgetest.Start(t, edgeCfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	codec, err := session.NewCodec([][]byte{[]byte(reportSecret)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, jwt, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+ed.Addr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+jwt)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m map[string]any
		json.NewDecoder(res.Body).Decode(&m)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d %v", path, res.StatusCode, m)
		}
		return m
	}
	for _, u := range []string{"ann", "bob"} {
		jwt, _ := codec.Sign(u, time.Now())
		tok := post("/api/seckill/token", jwt, `{"productId":"p1"}`)["token"].(string)
		post("/api/seckill/do", jwt, `{"productId":"p1","token":"`+tok+`","quantity":1}`)
	}

	// The command's config names the running edge's admin listener.
	cli := filepath.Join(dir, "cli.yaml")
	os.WriteFile(cli, []byte(fmt.Sprintf("admin: {addr: %q}\n", ed.Admin)), 0o644)
	out := filepath.Join(dir, "out")
	var stdout, stderr bytes.Buffer
	deadline := time.Now().Add(20 * time.Second)
	var rep report.Report
	for {
		stdout.Reset()
		stderr.Reset()
		if code := run([]string{"report", "-c", cli, "-product", "p1", "-out", out}, &stdout, &stderr); code != 0 {
			t.Fatalf("proxy report: exit %d: %s", code, stderr.String())
		}
		b, err := os.ReadFile(filepath.Join(out, "report-p1.json"))
		if err != nil {
			t.Fatal(err)
		}
		rep = report.Report{}
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Orders.Orders == 2 && rep.Edges != nil && rep.Edges.Answers["200"] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the report never held the 2 orders and their answers: %s", b)
		}
		time.Sleep(200 * time.Millisecond) // the consumer and the edge's sampler write on their own schedules
	}
	if got := strings.Fields(stdout.String()); len(got) != 2 || got[1] != filepath.Join(out, "report-p1.html") {
		t.Errorf("stdout %q, want the two paths", stdout.String())
	}
	page, err := os.ReadFile(filepath.Join(out, "report-p1.html"))
	if err != nil || !bytes.Contains(page, []byte("Sale report — p1")) || !bytes.Contains(page, []byte("<svg")) {
		t.Fatalf("page: %v\n%.300s", err, page)
	}
	if rep.Sale.Initial != 10 || rep.Sale.Remaining != 8 || rep.Reconcile == nil || !rep.Reconcile.Clean {
		t.Errorf("report sale %+v reconcile %+v", rep.Sale, rep.Reconcile)
	}

	empty := filepath.Join(dir, "empty")
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"report", "-c", cli, "-out", empty}, 2, "usage: proxy report"},
		{[]string{"report", "-c", cli, "-product", "bad}id", "-out", empty}, 2, "usage: proxy report"},
		{[]string{"report", "-c", cli, "-product", "p1", "-out", empty, "stray"}, 2, "usage: proxy report"},
		{[]string{"report", "-c", cli, "-product", "nope", "-out", empty}, 1, "no sale of this product"},
	} {
		stderr.Reset()
		if code := run(tc.args, io.Discard, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.msg) {
			t.Errorf("%q: exit %d, %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.msg)
		}
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("a refused report wrote %s (%v)", empty, err)
	}
}
