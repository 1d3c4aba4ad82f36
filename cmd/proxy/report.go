package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"flashgate/conf"
	"flashgate/orders/order"
	"flashgate/proxy"
	"flashgate/proxy/report"
)

// reportCmd is `proxy report -c FILE -product P [-out DIR]`: one sale's
// report, report-P.html (self-contained) and report-P.json, written to DIR.
// With real Redis, Kafka and ClickHouse it reads them itself; with the
// embedded stand-ins, which live inside the running edge, it asks that
// edge's admin listener, as `proxy reconcile` does.
func reportCmd(c *command, args []string, stdout, stderr io.Writer) int {
	fs := c.flags(stderr)
	cfgPath := fs.String("c", "conf/edge.yaml", "config file")
	product := fs.String("product", "", "the sale's product id (required)")
	out := fs.String("out", ".", "directory to write report-<product>.html and .json into")
	if !parseArgs(fs, args, stderr) {
		return 2
	}
	if !order.ValidProductID([]byte(*product)) {
		fmt.Fprintf(stderr, "proxy report: -product: a product id, got %q\n", *product)
		fs.Usage()
		return 2
	}
	doc, err := conf.LoadFile(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "proxy report: configuration %s:\n%s\n", *cfgPath, indentErrors(err))
		return 1
	}
	cfg := doc.Config
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var rep *report.Report
	if cfg.Redis.Embedded() || len(cfg.Kafka.Brokers) == 0 || cfg.ClickHouse.Addr == "" {
		rep, err = reportViaAdmin(cfg, *product)
	} else {
		rep, err = proxy.RunReport(ctx, cfg, newLogger(cfg.Log, stderr), *product)
	}
	if err != nil {
		fmt.Fprintf(stderr, "proxy report: %v\n", err)
		return 1
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		fmt.Fprintf(stderr, "proxy report: %v\n", err)
		return 1
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		fmt.Fprintf(stderr, "proxy report: %v\n", err)
		return 1
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(stderr, "proxy report: %v\n", err)
		return 1
	}
	base := filepath.Join(*out, "report-"+*product)
	for _, f := range []struct {
		path string
		body []byte
	}{{base + ".json", append(js, '\n')}, {base + ".html", page.Bytes()}} {
		if err := os.WriteFile(f.path, f.body, 0o644); err != nil {
			fmt.Fprintf(stderr, "proxy report: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, f.path)
	}
	if rep.Reconcile != nil && !rep.Reconcile.Clean {
		fmt.Fprintf(stderr, "proxy report: reconcile is not clean: %s\n", rep.Reconcile.Error)
	}
	return 0
}

// reportViaAdmin asks the running edge, which holds the embedded stores.
func reportViaAdmin(cfg *conf.Config, product string) (*report.Report, error) {
	u := "http://" + loopbackAddr(cfg.Admin.Addr) + proxy.PathReport + "?format=json&productId=" + url.QueryEscape(product)
	req, _ := http.NewRequest("GET", u, nil)
	if tok, _ := cfg.Admin.ResolveToken(); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("this config uses embedded stand-ins (or no ClickHouse or Kafka), which only the running edge reaches, and its admin listener %s does not answer: %w", cfg.Admin.Addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the edge answered %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	var rep report.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return nil, fmt.Errorf("the edge's report: %w", err)
	}
	return &rep, nil
}
