package proxy

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/conf/field"
	"flashgate/filters"
	"flashgate/proxy/routeroom"
	"flashgate/upstream"
)

// compileRooms builds the waiting rooms of the routes that have one, keyed
// by the route the upstream set routes their requests to.
func compileRooms(cfg *conf.Config, env *Env, set *upstream.Set) (map[*upstream.Route]*routeroom.Room, field.Errors) {
	var errs field.Errors
	var rooms map[*upstream.Route]*routeroom.Room
	for i, rc := range cfg.Upstreams.Routes {
		if rc.WaitingRoom == nil {
			continue
		}
		at := field.Join(field.Join("upstreams", field.Index("routes", i)), "waiting_room")
		tsec, random, err := cfg.Sale.TokenSecretBytes()
		if err != nil {
			continue // compileSale names it
		}
		if random && env.FallbackTokenSecret != nil {
			tsec = env.FallbackTokenSecret
		}
		rm, err := routeroom.New(*rc.WaitingRoom, routeroom.Options{Secrets: routeroom.DeriveSecrets(tsec), Store: env.Stock,
			Registry: env.Rooms, CookieSecure: cfg.Auth.CookieSecure || cfg.Listen.TLS.Enabled(), Log: env.Log, Start: env.Start})
		if err != nil {
			errs.Add(at, "%v", err)
			continue
		}
		if set == nil {
			continue
		}
		// The route's own host and prefix lead to the route itself.
		r := set.Route([]byte(rc.HostKey()), []byte(rc.Prefix))
		if r == nil {
			continue
		}
		if rooms == nil {
			rooms = map[*upstream.Route]*routeroom.Room{}
		}
		rooms[r] = rm
	}
	return rooms, errs
}

// serveRoom sends a request on a route with a waiting room to the origin
// only if the room lets it through; the room answers the others itself.
func (s *Server) serveRoom(ctx *fasthttp.RequestCtx, snap *Snapshot, r *filters.Request, up *upstream.Route, rm *routeroom.Room) {
	v, ok := rm.Gate(ctx, r.ClientIP, r.NowNano/1e6)
	if !ok {
		return
	}
	up.Serve(ctx, r.ClientIP, snap.RealIP)
	rm.Finish(ctx, &v)
}

// roomTick is how often every edge reads its route rooms' state (the
// method above all: a switch reaches every edge's memory within it).
const roomTick = 250 * time.Millisecond

func (s *Server) startRooms() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopRooms = cancel
	if s.env.Rooms != nil {
		go s.env.Rooms.Run(ctx, roomTick)
	}
}
