package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/orders/stock"
	"flashgate/proxy/routeroom"
	"flashgate/sale/api"
)

// handleAdminRooms serves the route rooms' operator calls:
//
//	GET  /admin/rooms          every route room's state (from Redis)
//	POST /admin/rooms          {"room", "method", "admitPerMinute", "maxActive"}: a live change on every edge
//	POST /admin/rooms/bypass   {"room", "ttl"}: a signed bypass token for staff and monitors
func (s *Server) handleAdminRooms(ctx *fasthttp.RequestCtx, path string) bool {
	switch path {
	case "/admin/rooms":
		if ctx.IsPost() {
			s.adminRoomChange(ctx)
		} else {
			s.adminRoomList(ctx)
		}
	case "/admin/rooms/bypass":
		if s.requirePost(ctx) {
			s.adminRoomBypass(ctx)
		}
	default:
		return false
	}
	return true
}

// roomsByName are the snapshot's rooms, one per name.
func roomsByName(snap *Snapshot) map[string]*routeroom.Room {
	out := map[string]*routeroom.Room{}
	for _, rm := range snap.Rooms {
		out[rm.Name()] = rm
	}
	return out
}

// decodeRoomCall reads an operator's call into req and finds the room its
// name field names; nil when it answered the refusal itself.
func (s *Server) decodeRoomCall(ctx *fasthttp.RequestCtx, req any, name *string) *routeroom.Room {
	if rej := decodeAdmin(ctx, req); rej != nil {
		rej.Write(ctx)
		return nil
	}
	rm := roomsByName(s.snap.Load())[*name]
	if rm == nil {
		api.NotFound.WithMessage("no route room " + *name).Write(ctx)
	}
	return rm
}

func (s *Server) adminRoomList(ctx *fasthttp.RequestCtx) {
	actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	nowMs := s.opts.Now() / 1e6
	// A room's state from Redis, and its last minute as this edge's tick
	// computed it (the dashboard's over-time figures).
	type answer struct {
		stock.RouteRoomInfo
		routeroom.Stats
	}
	out := map[string]answer{}
	for name, rm := range roomsByName(s.snap.Load()) {
		info, err := rm.Info(actx, stock.RouteChange{}, nowMs)
		if err != nil {
			api.AdminUnavailable.WithMessage(err.Error()).Write(ctx)
			return
		}
		a := answer{RouteRoomInfo: info}
		if s.env.Rooms != nil {
			a.Stats, _ = s.env.Rooms.Stats(name)
		}
		out[name] = a
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(out))
}

func (s *Server) adminRoomChange(ctx *fasthttp.RequestCtx) {
	var req struct {
		Room           string `json:"room"`
		Method         string `json:"method"`
		AdmitPerMinute *int64 `json:"admitPerMinute"`
		MaxActive      *int64 `json:"maxActive"`
	}
	rm := s.decodeRoomCall(ctx, &req, &req.Room)
	if rm == nil {
		return
	}
	switch {
	case req.Method == "config":
		req.Method = "-" // the operator's method is dropped: the config's (and its events') again
	case req.Method != "" && !conf.ValidRoomMethod(req.Method):
		api.AdminRouteRoomUsage.Write(ctx)
		return
	}
	s.audit(ctx, "route_room", "room", req.Room, "method", req.Method, "admit_per_minute", req.AdmitPerMinute, "max_active", req.MaxActive)
	actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := rm.Info(actx, stock.RouteChange{Method: req.Method, Rate: req.AdmitPerMinute, Cap: req.MaxActive}, s.opts.Now()/1e6)
	switch {
	case err == nil:
		api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(info))
	case errors.Is(err, stock.ErrInvalid):
		api.AdminRouteRoomUsage.Write(ctx)
	default:
		api.AdminUnavailable.WithMessage(err.Error()).Write(ctx)
	}
}

func (s *Server) adminRoomBypass(ctx *fasthttp.RequestCtx) {
	var req struct {
		Room string `json:"room"`
		TTL  string `json:"ttl"`
	}
	rm := s.decodeRoomCall(ctx, &req, &req.Room)
	if rm == nil {
		return
	}
	ttl, err := time.ParseDuration(req.TTL)
	if err != nil || ttl < time.Second || ttl > 720*time.Hour {
		api.AdminRouteRoomUsage.Write(ctx)
		return
	}
	exp := s.opts.Now()/1e6 + ttl.Milliseconds()
	s.audit(ctx, "route_room_bypass", "room", req.Room, "ttl", ttl.String())
	api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(map[string]any{
		"room": req.Room, "token": rm.MintBypass(exp), "expiresMs": exp,
		"cookie": routeroom.BypassCookie, "header": routeroom.BypassHeader,
	}))
}
