package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"flashgate/filters"
	"flashgate/metrics"
	"flashgate/upstream"
)

// route classifies a request for metrics and for choosing the chain.
type route uint8

const (
	routePage route = iota
	routeAsset
	routeAPI
	routeOrigin
	routeNotFound
	routeWebhook // the payment provider's webhook
	numRoutes
)

var routeNames = [numRoutes]string{"page", "asset", "api", "origin", "not_found", "webhook"}

// serverMetrics are the edge's own counters. Per-request recording is a few
// atomic adds on preallocated cells.
type serverMetrics struct {
	reg metrics.Registry

	requests [numRoutes][600]metrics.Counter
	latency  [numRoutes]*metrics.Histogram
	// charts count the purchase call's answers alone (POST
	// /api/seckill/do, every answer), per sale, by code and latency: the
	// dashboard's charts and the sale's timeline read them, and
	// flashgate_sale_do_duration_seconds is their latencies summed (route
	// api mixes the call with status polls and tokens).
	charts *chartStats

	reloadOK, reloadFailed metrics.Counter
	lastReloadOK           atomic.Bool
	lastReloadUnix         atomic.Int64

	// reconcileMismatch is oversold+lost+duplicated of the last reconcile
	// run on this edge (-1: never run).
	reconcileMismatch metrics.Gauge
	reconcileUnix     metrics.Gauge

	// Payments on this edge: orders it paid, orders its pay calls found
	// past their deadline and expired (the sweep counts its own), webhook
	// calls refused for their signature or timestamp.
	ordersPaid, ordersExpired, webhookRefused metrics.Counter

	upMu   sync.Mutex
	pools  atomic.Pointer[map[string]*poolMetrics]
	active metrics.Gauge
}

type poolMetrics struct {
	latency *metrics.Histogram
	codes   [600]metrics.Counter
}

// newServerMetrics makes the edge's families, the Go runtime's and the
// process's among them (go_*, process_*, flashgate_build_info; version is
// the one the binary was built with, see metrics.ReadBuild).
func newServerMetrics(zones *filters.Zones, ups *upstream.Manager, version string) *serverMetrics {
	m := &serverMetrics{}
	metrics.RegisterRuntime(&m.reg, metrics.ReadBuild(version))
	for i := range m.latency {
		m.latency[i] = metrics.NewHistogram(metrics.LatencyBuckets)
	}
	m.charts = newChartStats()
	empty := map[string]*poolMetrics{}
	m.pools.Store(&empty)
	m.reconcileMismatch.Set(-1)
	m.reg.Register("flashgate_reconcile_mismatch", "Oversold + lost + duplicated units found by the last reconcile run on this edge (-1: never run).", "gauge", func(w *metrics.Writer) {
		w.Value(float64(m.reconcileMismatch.Value()))
	})
	m.reg.Register("flashgate_orders_paid_total", "Orders this edge recorded as paid (POST /admin/orders/paid and the payment webhook).", "counter", func(w *metrics.Writer) {
		w.Value(float64(m.ordersPaid.Value()))
	})
	m.reg.Register("flashgate_payment_webhooks_refused_total", "Payment webhook calls refused for their signature or timestamp.", "counter", func(w *metrics.Writer) {
		w.Value(float64(m.webhookRefused.Value()))
	})
	m.reg.Register("flashgate_reconcile_last_run_timestamp_seconds", "Unix time of the last reconcile run on this edge.", "gauge", func(w *metrics.Writer) {
		w.Value(float64(m.reconcileUnix.Value()))
	})

	m.reg.Register("flashgate_http_requests_total", "Requests answered by the edge, by route and status code.", "counter", func(w *metrics.Writer) {
		for r := range m.requests {
			for code := range m.requests[r] {
				if v := m.requests[r][code].Value(); v > 0 {
					w.Value(float64(v), metrics.Label{Name: "route", Value: routeNames[r]}, metrics.Label{Name: "code", Value: strconv.Itoa(code)})
				}
			}
		}
	})
	m.reg.Register("flashgate_http_request_duration_seconds", "Time from request read to response written by the handler, by route.", "histogram", func(w *metrics.Writer) {
		for r, h := range m.latency {
			w.Histogram(h, metrics.Label{Name: "route", Value: routeNames[r]})
		}
	})
	m.reg.Register("flashgate_sale_do_duration_seconds", "Time the edge took to answer POST /api/seckill/do (every answer, the filter chain's refusals included).", "histogram", func(w *metrics.Writer) {
		w.Histogram(m.charts.latency())
	})
	m.reg.Register("flashgate_http_requests_in_flight", "Requests being handled now.", "gauge", func(w *metrics.Writer) {
		w.Value(float64(m.active.Value()))
	})
	m.reg.Register("flashgate_filter_verdicts_total", "Filter decisions by filter name and outcome (dry_run_reject: would have rejected).", "counter", func(w *metrics.Writer) {
		zones.EachStats(func(name string, s *filters.Stats) {
			f := metrics.Label{Name: "filter", Value: name}
			w.Value(float64(s.Passed.Load()), f, metrics.Label{Name: "outcome", Value: "pass"})
			w.Value(float64(s.Rejected.Load()), f, metrics.Label{Name: "outcome", Value: "reject"})
			w.Value(float64(s.DryRunRejected.Load()), f, metrics.Label{Name: "outcome", Value: "dry_run_reject"})
		})
	})
	m.reg.Register("flashgate_upstream_request_duration_seconds", "Time spent waiting for origin pools, by pool.", "histogram", func(w *metrics.Writer) {
		for name, pm := range *m.pools.Load() {
			w.Histogram(pm.latency, metrics.Label{Name: "pool", Value: name})
		}
	})
	m.reg.Register("flashgate_upstream_responses_total", "Responses from origin pools by pool and status (502/504: the edge's own answer when the origin failed).", "counter", func(w *metrics.Writer) {
		for name, pm := range *m.pools.Load() {
			for code := range pm.codes {
				if v := pm.codes[code].Value(); v > 0 {
					w.Value(float64(v), metrics.Label{Name: "pool", Value: name}, metrics.Label{Name: "code", Value: strconv.Itoa(code)})
				}
			}
		}
	})
	m.reg.Register("flashgate_upstream_server_up", "1 when the origin server is considered healthy.", "gauge", func(w *metrics.Writer) {
		for _, st := range ups.Snapshot() {
			v := 0.0
			if st.Healthy {
				v = 1
			}
			w.Value(v, metrics.Label{Name: "pool", Value: st.Pool}, metrics.Label{Name: "server", Value: st.Addr})
		}
	})
	registerCacheMetrics(&m.reg, ups)
	m.reg.Register("flashgate_config_reloads_total", "Configuration reload attempts by result.", "counter", func(w *metrics.Writer) {
		w.Value(float64(m.reloadOK.Value()), metrics.Label{Name: "result", Value: "success"})
		w.Value(float64(m.reloadFailed.Value()), metrics.Label{Name: "result", Value: "failure"})
	})
	m.reg.Register("flashgate_config_last_reload_successful", "1 if the last reload attempt succeeded.", "gauge", func(w *metrics.Writer) {
		v := 0.0
		if m.lastReloadOK.Load() {
			v = 1
		}
		w.Value(v)
	})
	m.reg.Register("flashgate_config_last_reload_timestamp_seconds", "Unix time of the last reload attempt.", "gauge", func(w *metrics.Writer) {
		w.Value(float64(m.lastReloadUnix.Load()))
	})
	return m
}

func (m *serverMetrics) observeRequest(r route, status int, d time.Duration) {
	if status < 0 || status >= 600 {
		status = 0
	}
	m.requests[r][status].Inc()
	m.latency[r].Observe(d)
}

// observeUpstream is the upstream manager's OnResponse hook.
func (m *serverMetrics) observeUpstream(pool string, status int, d time.Duration) {
	pm := (*m.pools.Load())[pool]
	if pm == nil {
		pm = m.addPool(pool)
	}
	if status < 0 || status >= 600 {
		status = 0
	}
	pm.codes[status].Inc()
	pm.latency.Observe(d)
}

// addPool copies the pool map on the rare first sight of a pool name so the
// hot path reads it without a lock.
func (m *serverMetrics) addPool(name string) *poolMetrics {
	m.upMu.Lock()
	defer m.upMu.Unlock()
	cur := *m.pools.Load()
	if pm := cur[name]; pm != nil {
		return pm
	}
	next := make(map[string]*poolMetrics, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	pm := &poolMetrics{latency: metrics.NewHistogram(metrics.LatencyBuckets)}
	next[name] = pm
	m.pools.Store(&next)
	return pm
}

// registerCacheMetrics writes the route microcaches' figures
// (upstream.CacheStats), labelled by route: its host and prefix.
func registerCacheMetrics(reg *metrics.Registry, ups *upstream.Manager) {
	family := func(name, help, typ string, value func(w *metrics.Writer, route metrics.Label, s *upstream.CacheStats)) {
		reg.Register(name, help, typ, func(w *metrics.Writer) {
			ups.EachCache(func(s upstream.CacheStats) {
				value(w, metrics.Label{Name: "route", Value: s.Route}, &s)
			})
		})
	}
	family("flashgate_cache_requests_total", "Requests through a route's cache by how they were answered (the X-Cache values).", "counter", func(w *metrics.Writer, route metrics.Label, s *upstream.CacheStats) {
		for i, n := range s.Requests {
			w.Value(float64(n), route, metrics.Label{Name: "result", Value: upstream.CacheResults[i]})
		}
	})
	family("flashgate_cache_origin_requests_total", "Requests a route's cache sent to the origin (misses, refreshes; not bypassing requests).", "counter", func(w *metrics.Writer, route metrics.Label, s *upstream.CacheStats) {
		w.Value(float64(s.OriginRequests), route)
	})
	family("flashgate_cache_evictions_total", "Stored answers evicted to make room for others (not expired ones).", "counter", func(w *metrics.Writer, route metrics.Label, s *upstream.CacheStats) {
		w.Value(float64(s.Evictions), route)
	})
	family("flashgate_cache_rejected_total", "Storable answers the cache did not take: admission preferred what it holds, or its write buffer was full.", "counter", func(w *metrics.Writer, route metrics.Label, s *upstream.CacheStats) {
		w.Value(float64(s.Rejected), route)
	})
	family("flashgate_cache_purged_total", "Stored answers (and Vary markers) an admin purge dropped (POST /admin/cache/purge).", "counter", func(w *metrics.Writer, route metrics.Label, s *upstream.CacheStats) {
		w.Value(float64(s.Purged), route)
	})
	family("flashgate_cache_invalidated_total", "Stored answers (and Vary markers) dropped because an unsafe request to their URL (or its Location) succeeded (RFC 9111 4.4).", "counter", func(w *metrics.Writer, route metrics.Label, s *upstream.CacheStats) {
		w.Value(float64(s.Invalidated), route)
	})
	family("flashgate_cache_entries", "Answers (and Vary markers) a route's cache holds.", "gauge", func(w *metrics.Writer, route metrics.Label, s *upstream.CacheStats) {
		w.Value(float64(s.Entries), route)
	})
	family("flashgate_cache_bytes", "Memory a route's cache holds, as cache.max_bytes counts it.", "gauge", func(w *metrics.Writer, route metrics.Label, s *upstream.CacheStats) {
		w.Value(float64(s.Bytes), route)
	})
	family("flashgate_cache_max_bytes", "A route's cache.max_bytes.", "gauge", func(w *metrics.Writer, route metrics.Label, s *upstream.CacheStats) {
		w.Value(float64(s.MaxBytes), route)
	})
}
