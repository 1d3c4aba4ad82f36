package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/orders/order"
	"flashgate/orders/stock"
	"flashgate/sale"
	"flashgate/sale/api"
	"flashgate/sale/catalog"
)

// adminBodyLimit bounds admin JSON bodies.
const adminBodyLimit = 64 << 10

// handleAdminSale serves the sale's admin calls; it reports false for
// paths it does not know.
func (s *Server) handleAdminSale(ctx *fasthttp.RequestCtx, path string) bool {
	actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch path {
	case "/admin/waitroom":
		s.adminRoom(ctx, actx)
	case "/admin/waitroom/lottery":
		if !ctx.IsGet() {
			api.MethodNotAllowed.Write(ctx)
			return true
		}
		l, err := s.sale.RoomLottery(actx, string(ctx.QueryArgs().Peek("productId")))
		if err != nil {
			roomRejection(err).Write(ctx)
			return true
		}
		api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(l))
	case "/admin/activities":
		if ctx.IsGet() {
			s.listActivities(ctx)
			return true
		}
		if !s.requirePost(ctx) {
			return true
		}
		var c conf.ActivityConfig
		if rej := decodeAdmin(ctx, &c); rej != nil {
			rej.Write(ctx)
			return true
		}
		a, errs := catalog.Build(c, time.Unix(0, s.opts.Now()))
		if ttl := s.snap.Load().Doc.Config.Sale.OrderTTL; a != nil && a.PayTimeoutMs >= ttl.Milliseconds() {
			// The order's state must outlive the deadline it guards (conf
			// checks the same for the file's sales).
			errs.Add("pay_timeout", "must be below sale.order_ttl (%v), got %v", ttl, time.Duration(a.PayTimeoutMs)*time.Millisecond)
		}
		if len(errs) > 0 {
			api.BadRequest.WithMessage(errs.Error()).Write(ctx)
			return true
		}
		s.audit(ctx, "put_activity", "product", a.ProductID, "stock", a.Stock, "limit", a.Limit, "start_ms", a.StartMs, "end_ms", a.EndMs)
		if err := s.sale.PutActivity(actx, a); err != nil {
			api.AdminUnavailable.WithMessage(err.Error()).Write(ctx)
			return true
		}
		api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(map[string]any{"ok": true, "productId": a.ProductID}))
	case "/admin/restock":
		if !s.requirePost(ctx) {
			return true
		}
		var req struct {
			ProductID string `json:"productId"`
			Add       int64  `json:"add"`
		}
		if rej := decodeAdmin(ctx, &req); rej != nil {
			rej.Write(ctx)
			return true
		}
		if !order.ValidProductID(req.ProductID) || req.Add <= 0 || req.Add > 1e9 {
			api.AdminRestockUsage.Write(ctx)
			return true
		}
		s.audit(ctx, "restock", "product", req.ProductID, "add", req.Add)
		n, err := s.sale.Restock(actx, req.ProductID, req.Add)
		if err != nil {
			rej := api.AdminUnavailable
			if errors.Is(err, stock.ErrNotWarmed) {
				rej = api.NotFound
			}
			rej.WithMessage(err.Error()).Write(ctx)
			return true
		}
		api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(map[string]any{"ok": true, "productId": req.ProductID, "stock": n}))
	case "/admin/degrade":
		if ctx.IsGet() {
			all, products := s.sale.DegradeState()
			api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(map[string]any{"all": all, "products": products}))
			return true
		}
		if !s.requirePost(ctx) {
			return true
		}
		var req struct {
			ProductID string `json:"productId"`
			On        *bool  `json:"on"`
		}
		if rej := decodeAdmin(ctx, &req); rej != nil {
			rej.Write(ctx)
			return true
		}
		if req.On == nil || (req.ProductID != "" && !order.ValidProductID(req.ProductID)) {
			api.AdminDegradeUsage.Write(ctx)
			return true
		}
		s.audit(ctx, "degrade", "product", req.ProductID, "on", *req.On)
		stored, err := s.sale.SetDegraded(actx, req.ProductID, *req.On)
		if err != nil {
			api.AdminUnavailable.WithMessage(err.Error()).Write(ctx)
			return true
		}
		all, products := s.sale.DegradeState()
		out := map[string]any{"ok": true, "all": all, "products": products,
			"stored": map[string]bool{"redis": stored.Redis, "durable": stored.Durable}}
		if stored.Missed != nil {
			out["warning"] = "recorded in one place only, written to the other when it answers: " + stored.Missed.Error()
		}
		api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(out))
	default:
		return false
	}
	return true
}

func (s *Server) listActivities(ctx *fasthttp.RequestCtx) {
	nowMs := s.opts.Now() / 1e6
	type item struct {
		ProductID string `json:"productId"`
		Name      string `json:"name"`
		Price     string `json:"price"`
		Status    string `json:"status"`
		Stock     int64  `json:"stock"`
		Remaining int64  `json:"remaining"`
		Limit     int    `json:"limit"`
		StartMs   int64  `json:"startMs"`
		EndMs     int64  `json:"endMs"`
		SoldOut   bool   `json:"soldOut"`
		Hot       bool   `json:"hot"`
		Degraded  bool   `json:"degraded"`
		// PayTimeoutMs is the sale's time to pay in force (0: none).
		PayTimeoutMs int64 `json:"payTimeoutMs"`
	}
	global := s.snap.Load().Sale.PayTimeoutMs
	out := []item{}
	for _, e := range s.env.Sales.List() {
		out = append(out, item{
			ProductID: e.ProductID, Name: e.Name, Price: string(catalog.AppendPrice(nil, e.PriceCents)),
			Status: e.PhaseAt(nowMs, e.SoldOut()).String(), Stock: e.Stock, Remaining: e.Remaining(),
			Limit: e.Limit, StartMs: e.StartMs, EndMs: e.EndMs, SoldOut: e.SoldOut(), Hot: e.Hot(),
			Degraded: s.sale.Degraded([]byte(e.ProductID)), PayTimeoutMs: e.PayTimeout(global),
		})
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(out))
}

// requirePost refuses a state-changing call that is not a POST. It writes
// the answer itself, unlike the other guards: the refusal carries an Allow
// header, which a shared rejection cannot (Write resets the response).
func (s *Server) requirePost(ctx *fasthttp.RequestCtx) bool {
	if ctx.IsPost() {
		return true
	}
	api.MethodNotAllowed.Write(ctx)
	ctx.Response.Header.Set(fasthttp.HeaderAllow, "POST")
	return false
}

// audit logs an admin action: who (the caller's address; every caller
// holds the one admin token) and what.
func (s *Server) audit(ctx *fasthttp.RequestCtx, action string, kv ...any) {
	args := append([]any{"action", action, "remote", ctx.RemoteIP().String()}, kv...)
	s.log.Info("admin action", args...)
}

// decodeAdmin reads an admin call's JSON body into v, or says why not.
func decodeAdmin(ctx *fasthttp.RequestCtx, v any) *api.Rejection {
	body := ctx.PostBody()
	if len(body) > adminBodyLimit {
		return api.AdminBodyTooLarge
	}
	dec := json.NewDecoder(bytesReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return api.BadRequest.WithMessage("malformed JSON: " + err.Error())
	}
	return nil
}

// adminRoom: GET lists the sales' waiting rooms; POST {"productId",
// "action": pause|resume|close|open|rate, "admitPerMinute"} changes one,
// live on every edge.
func (s *Server) adminRoom(ctx *fasthttp.RequestCtx, actx context.Context) {
	if ctx.IsGet() {
		rows, err := s.sale.Rooms(actx)
		if err != nil {
			api.AdminUnavailable.WithMessage(err.Error()).Write(ctx)
			return
		}
		if rows == nil {
			rows = []sale.RoomRow{}
		}
		api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(map[string]any{"sales": rows}))
		return
	}
	if !s.requirePost(ctx) {
		return
	}
	var req struct {
		ProductID      string `json:"productId"`
		Action         string `json:"action"`
		AdmitPerMinute int64  `json:"admitPerMinute"`
	}
	if rej := decodeAdmin(ctx, &req); rej != nil {
		rej.Write(ctx)
		return
	}
	switch req.Action {
	case "pause", "resume", "close", "open":
	case "rate":
		if req.AdmitPerMinute < 1 || req.AdmitPerMinute > 10_000_000 {
			api.AdminRoomUsage.Write(ctx)
			return
		}
	default:
		api.AdminRoomUsage.Write(ctx)
		return
	}
	s.audit(ctx, "waitroom", "product", req.ProductID, "action", req.Action, "admit_per_minute", req.AdmitPerMinute)
	row, err := s.sale.RoomAction(actx, req.ProductID, req.Action, req.AdmitPerMinute)
	if err != nil {
		roomRejection(err).Write(ctx)
		return
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(map[string]any{"ok": true, "sale": row}))
}

// roomRejection is the answer of a failed room call: the sale has no room
// (or no such sale), or the store failed.
func roomRejection(err error) *api.Rejection {
	if errors.Is(err, sale.ErrNoRoom) || errors.Is(err, stock.ErrInvalid) {
		return api.NotFound.WithMessage(err.Error())
	}
	return api.AdminUnavailable.WithMessage(err.Error())
}
