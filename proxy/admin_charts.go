package proxy

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/proxy/dashboard"
	"flashgate/proxy/report"
	"flashgate/sale/api"
)

// PathFleet is the charts' view of every edge: the sales' timelines in
// Redis (the records every edge writes once a second, charts.go) summed by
// second over the last 15 minutes; ?since=<unix ms> asks only for the
// seconds after it. One Redis read per sale per call: the page asks every
// few seconds while it is open.
const PathFleet = "/admin/dashboard/fleet"

// fleetView is GET /admin/dashboard/fleet.
type fleetView struct {
	StepMs   int            `json:"stepMs"`
	Products []fleetProduct `json:"products"`
	// All is every sale together.
	All report.Series `json:"all"`
}

type fleetProduct struct {
	ProductID string `json:"productId"`
	report.Series
}

// handleCharts serves the charts' and the report's admin calls; it reports
// false for paths it does not know.
func (s *Server) handleCharts(ctx *fasthttp.RequestCtx, path string) bool {
	switch path {
	case PathFleet:
		if !ctx.IsGet() {
			api.MethodNotAllowed.Write(ctx)
			return true
		}
		since, rej := dashboard.Since(ctx)
		if rej != nil {
			rej.Write(ctx)
			return true
		}
		actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		v, err := s.fleet(actx, since)
		if err != nil {
			api.AdminUnavailable.WithMessage(err.Error()).Write(ctx)
			return true
		}
		api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(v))
	case PathReport:
		s.serveReport(ctx)
	default:
		return false
	}
	return true
}

// fleet reads every sale's timeline after sinceMs, within the charts'
// window, and sums it by second.
func (s *Server) fleet(ctx context.Context, sinceMs int64) (fleetView, error) {
	nowSec := s.opts.Now() / 1e9
	from := max(sinceMs/1000+1, nowSec-dashboard.HistoryLen+1)
	v := fleetView{StepMs: 1000, Products: []fleetProduct{}}
	var all []report.Second
	for _, e := range s.env.Sales.List() {
		raw, err := s.store.Timeline(ctx, e.ProductID, from-60) // a minute before: seeds the flags and figures
		if err != nil {
			return v, err
		}
		recs := make([]report.Second, 0, len(raw))
		for _, b := range raw {
			if r, err := report.DecodeSecond(b); err == nil {
				recs = append(recs, r)
			}
		}
		all = append(all, recs...)
		v.Products = append(v.Products, fleetProduct{ProductID: e.ProductID, Series: report.Aggregate(recs, from, nowSec)})
	}
	v.All = report.Aggregate(all, from, nowSec)
	return v, nil
}
