package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"flashgate/conf"
	"flashgate/proxy"
)

// subcommand runs `proxy orders` or `proxy reconcile`.
func subcommand(c *command, args []string, stdout, stderr io.Writer) int {
	name := c.name
	fs := c.flags(stderr)
	cfgPath := fs.String("c", "conf/edge.yaml", "config file")
	if !parseArgs(fs, args, stderr) {
		return 2
	}
	doc, err := conf.LoadFile(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "proxy %s: configuration %s:\n%s\n", name, *cfgPath, indentErrors(err))
		return 1
	}
	cfg := doc.Config
	if name == "reconcile" && (cfg.Redis.Embedded() || len(cfg.Kafka.Brokers) == 0 || cfg.ClickHouse.Addr == "") {
		// The embedded stand-ins live inside the running edge: ask it.
		return reconcileViaAdmin(cfg, stdout, stderr)
	}
	if cfg.Redis.Embedded() || len(cfg.Kafka.Brokers) == 0 {
		fmt.Fprintf(stderr, "proxy %s: needs redis.addr and kafka.brokers: the embedded stand-ins exist only inside an edge (set orders.consumer: true there instead)\n", name)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := newLogger(cfg.Log, stderr)
	if name == "reconcile" {
		rep, err := proxy.RunReconcile(ctx, cfg, logger)
		rep.Print(stdout)
		if err != nil {
			fmt.Fprintf(stderr, "proxy reconcile: %v\n", err)
			return 1
		}
		return 0
	}
	if err := proxy.RunOrders(ctx, cfg, logger); err != nil {
		fmt.Fprintf(stderr, "proxy orders: %v\n", err)
		return 1
	}
	return 0
}

// reconcileViaAdmin asks the running edge, which holds the embedded stores.
func reconcileViaAdmin(cfg *conf.Config, stdout, stderr io.Writer) int {
	req, _ := http.NewRequest("GET", "http://"+loopbackAddr(cfg.Admin.Addr)+"/admin/reconcile", nil)
	if tok, _ := cfg.Admin.ResolveToken(); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "proxy reconcile: this config uses embedded stand-ins, which live inside the running edge, and its admin listener %s does not answer: %v\n", cfg.Admin.Addr, err)
		return 1
	}
	defer resp.Body.Close()
	io.Copy(stdout, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}
