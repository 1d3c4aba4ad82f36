package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"flashgate/conf"
	"flashgate/conf/field"
	"flashgate/orders/consumer"
	"flashgate/orders/orderstore"
	"flashgate/orders/reconcile"
	"flashgate/orders/stock"
	"flashgate/proxy"
)

// subcommand runs `proxy orders` or `proxy reconcile`.
func subcommand(name string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("proxy "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("c", "conf/edge.yaml", "config file")
	if err := fs.Parse(args); err != nil {
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
	pw, _ := field.ResolveEnv(cfg.Redis.Password)
	st, err := stock.Open(ctx, cfg.Redis.Addr, stock.Options{Timeout: cfg.Redis.Timeout, Password: pw})
	if err != nil {
		fmt.Fprintf(stderr, "proxy %s: redis: %v\n", name, err)
		return 1
	}
	defer st.Close()
	store, err := proxy.OpenOrderStore(ctx, cfg, "")
	if err != nil {
		fmt.Fprintf(stderr, "proxy %s: order store: %v\n", name, err)
		return 1
	}
	defer store.Close()

	if name == "reconcile" {
		return runReconcile(ctx, cfg, st, store, stdout, stderr)
	}
	c, err := consumer.New(consumer.Config{
		Brokers: cfg.Kafka.Brokers, Topic: cfg.Kafka.Topic, DLQTopic: cfg.Kafka.DLQTopic,
		Group: cfg.Orders.Group, BatchSize: cfg.Orders.BatchSize, BatchTime: cfg.Orders.BatchTime,
		Store: store, Stock: st, Log: logger,
		// Edges push the outcome to shoppers waiting on event streams.
		OnStored: func(products map[string][]int64) {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if err := st.PublishStored(pctx, products); err != nil {
				logger.Warn("stored orders not pushed; their streams end at the deadline with the state read then", "err", err)
			}
		},
	})
	if err != nil {
		fmt.Fprintf(stderr, "proxy orders: %v\n", err)
		return 1
	}
	logger.Info("order consumer started", "brokers", strings.Join(cfg.Kafka.Brokers, ","), "topic", cfg.Kafka.Topic, "group", cfg.Orders.Group)
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		logger.Error("order consumer failed", "err", err)
		return 1
	}
	logger.Info("order consumer stopped", "stored", c.Stats().Stored)
	return 0
}

func runReconcile(ctx context.Context, cfg *conf.Config, st *stock.Store, store orderstore.Store, stdout, stderr io.Writer) int {
	drain := func(ctx context.Context) error {
		return consumer.WaitDrained(ctx, cfg.Kafka.Brokers, cfg.Kafka.Topic, cfg.Orders.Group, 100*time.Millisecond)
	}
	rep, err := reconcile.Run(ctx, st, store, nil, nil,
		reconcile.WithDrain(drain, 60*time.Second), reconcile.WithSettle(10*time.Second, 200*time.Millisecond))
	rep.Print(stdout)
	if err != nil {
		fmt.Fprintf(stderr, "proxy reconcile: %v\n", err)
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

// loopbackAddr turns ":9901" into "127.0.0.1:9901".
func loopbackAddr(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	return addr
}
