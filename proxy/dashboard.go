package proxy

import (
	"time"

	"flashgate/proxy/dashboard"
)

// dashboardSnapshot gathers what the ops dashboard shows. It reads only
// in-memory state (no Redis call), so an open dashboard costs the edge
// nothing worth measuring.
func (s *Server) dashboardSnapshot() dashboard.Snapshot {
	now := s.opts.Now()
	snap := s.snap.Load()
	lr := s.LastReload()
	out := dashboard.Snapshot{
		ServerTimeMs: now / 1e6,
		Node:         itoa(uint64(snap.Doc.Config.NodeID)),
		Version:      s.opts.Version,
		Reload:       dashboard.Reload{At: lr.At.Format(time.RFC3339), Trigger: lr.Trigger, Version: lr.Version, Error: lr.Error},
		Breaker:      s.sale.BreakerState().String(),
		Pipeline:     dashboard.Pipeline{OutboxPending: dashboard.Unknown, KafkaLag: dashboard.Unknown, Stored: dashboard.Unknown, DeadLettered: dashboard.Unknown},
	}
	out.DegradedAll, _ = s.sale.DegradeState()
	for _, e := range s.env.Sales.List() {
		remaining := e.Remaining()
		p := dashboard.Product{
			ProductID: e.ProductID, Name: e.Name, Status: e.PhaseAt(now/1e6, e.SoldOut()).String(),
			Stock: e.Stock, Remaining: remaining, Attempts: e.Attempts(),
			SoldOut: e.SoldOut(), Hot: e.Hot(), Degraded: s.sale.Degraded([]byte(e.ProductID)),
			Breaker: s.sale.ProductBreakerState(e.ProductID).String(), OutboxPending: dashboard.Unknown, Stored: dashboard.Unknown,
			Unpaid: dashboard.Unknown, Paid: dashboard.Unknown, Expired: dashboard.Unknown, Due: dashboard.Unknown,
		}
		if remaining >= 0 {
			p.Sold = e.Stock - remaining
		}
		p.Recovering, p.Recoveries = s.sale.Recovering(e.ProductID)
		if p.Recovering {
			p.Status = "recovering"
		}
		out.Products = append(out.Products, p)
	}
	// The filters in chain order, as ops read the config.
	for _, e := range snap.APIChain.Entries() {
		st := e.Stats
		out.Filters = append(out.Filters, dashboard.Filter{
			Name: e.Name, Type: e.Type,
			Passed: st.Passed.Load(), Rejected: st.Rejected.Load(), DryRunRejected: st.DryRunRejected.Load(),
		})
	}
	s.orders.fillDashboard(&out)
	return out
}
