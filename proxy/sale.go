package proxy

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"time"

	"flashgate/conf"
	"flashgate/conf/field"
	"flashgate/orders/orderid"
	"flashgate/orders/stock"
	"flashgate/sale"
	"flashgate/sale/push"
)

// openSale connects to Redis (or starts the embedded stand-in), builds the
// sale service, warms the configured sales and starts the background
// refresh. Redis settings are read once: changing them needs a restart.
func (s *Server) openSale(cfg *conf.Config, snap *conf.Snapshot) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc := cfg.Redis
	password, _ := field.ResolveEnv(rc.Password)
	dataDir := ""
	if rc.Embedded() {
		if cfg.DataDir != "" {
			dataDir = filepath.Join(cfg.DataDir, "redis")
		}
		s.log.Warn("redis.addr is empty: using the embedded in-process Redis stand-in (demo only, ~15x slower than redis-server)", "data_dir", dataDir)
	}
	store, err := stock.Open(ctx, rc.Addr, stock.Options{
		Timeout:       rc.Timeout,
		QueueTimeout:  rc.QueueTimeout,
		MaxFlushDelay: rc.MaxFlushDelay,
		OrderTTL:      cfg.Sale.OrderTTL,
		DataDir:       dataDir,
		Password:      password,
	})
	if err != nil {
		return fmt.Errorf("redis %q: %w", rc.Addr, err)
	}
	if store.Embedded() {
		// Where redis-cli can inspect the demo's keys.
		s.log.Info("embedded Redis listening", "addr", store.Addr())
	}
	if n := store.LostOnOpen(); n > 0 {
		s.log.Warn("the embedded Redis did not stop cleanly last time: its sales are rebuilt from the order ledger before they reopen", "sales", n)
	}
	ids, err := orderid.NewGenerator(cfg.NodeID, func() int64 { return s.opts.Now() / 1e6 })
	if err != nil {
		store.Close()
		return err
	}
	breaker := sale.NewBreaker(cfg.Sale.BreakerFailures, cfg.Sale.BreakerOpenFor, nil, func(from, to sale.BreakerState) {
		s.log.Warn("redis circuit breaker changed state", "from", from.String(), "to", to.String())
	})
	s.store = store
	if !cfg.Events.Disabled {
		ec := cfg.Events
		ec.KeepHijackedConns, ec.Render, ec.Log, ec.Now = true, sale.AppendResult, s.log, s.opts.Now
		if s.events, err = push.New(store, ec); err != nil {
			store.Close()
			return err
		}
		s.events.Start(ctx)
		s.events.RegisterMetrics(&s.m.reg)
	}
	s.sale = sale.New(sale.Deps{
		Store: store, Activities: s.env.Activities, IDs: ids, Bought: s.env.Bought,
		Log: s.log, Node: cfg.NodeID, Now: s.opts.Now, Breaker: breaker, Events: s.events,
	})
	s.sale.RegisterMetrics(&s.m.reg)
	if err := s.openOrders(cfg); err != nil {
		if s.events != nil {
			s.events.Close()
		}
		store.Close()
		return fmt.Errorf("orders pipeline: %w", err)
	}
	if err := s.sale.Apply(ctx, snap.Sale); err != nil {
		s.log.Warn("sale warm-up incomplete; the refresh loop retries", "err", err)
	}
	s.sale.Start(cfg.Sale.RefreshInterval)
	if _, random, _ := cfg.Auth.SessionSecrets(); random {
		s.log.Warn("auth.secrets is not set: sessions use a random per-process secret (they end on restart and are not valid on other edges)")
	}
	if _, random, _ := cfg.Sale.TokenSecretBytes(); random {
		s.log.Warn("sale.token_secret is not set: purchase tokens use a random per-process secret (not valid on other edges)")
	}
	return nil
}

// Sale exposes the sale service (admin API, tests).
func (s *Server) Sale() *sale.Service { return s.sale }

// Store exposes the Redis side (tests, reconcile).
func (s *Server) Store() *stock.Store { return s.store }

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}
