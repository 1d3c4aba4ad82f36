package sale

import (
	"context"
	"fmt"
	"time"

	"flashgate/metrics"
	"flashgate/orders/stock"
	"flashgate/sale/catalog"
	"flashgate/sale/room"
)

// roomTick is how often the edge looks after its rooms (the pre-queue's
// key, the opening's lottery, the admission state it refuses from): well
// under a poll's interval, so the opening is drawn in time for the first
// polls after it.
const roomTick = 250 * time.Millisecond

// roomLoop looks after the rooms until ctx ends.
func (s *Service) roomLoop(ctx context.Context) {
	t := time.NewTicker(roomTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.TendRooms(ctx)
		}
	}
}

// TendRooms does, for every room, what its moment asks: draws the
// pre-queue's key once it opens, closes the pre-queue and draws the
// lottery at the opening, and reads the admission state the edge refuses
// from. Any edge may do each; the first one's result is kept (Redis).
func (s *Service) TendRooms(ctx context.Context) {
	nowMs := s.d.Now() / 1e6
	for _, e := range s.d.Sales.List() {
		if e.Room == nil || nowMs < e.Room.OpensMs || nowMs >= e.EndMs+roomGrace.Milliseconds() {
			continue
		}
		if err := s.tendRoom(ctx, e, nowMs); err != nil && ctx.Err() == nil {
			s.d.Log.Warn("waiting room upkeep failed", "product", e.ProductID, "err", err)
		}
	}
}

func (s *Service) tendRoom(ctx context.Context, e catalog.Entry, nowMs int64) error {
	rm, view, rs := e.Room, s.rooms.ensure(e.ProductID), roomSaleOf(e.Sale)
	if !view.keyed.Load() && rm.Lottery() {
		key, commit := room.NewKey()
		if _, err := s.d.Store.RoomOpenPrequeue(ctx, rs, key, commit); err != nil {
			return err
		}
		view.keyed.Store(true)
	}
	if nowMs >= rm.StartMs && !view.ranked.Load() {
		if err := s.drawLottery(ctx, e, rs); err != nil {
			return err
		}
	}
	return s.refreshRoom(ctx, e, nowMs)
}

// drawLottery closes the pre-queue and writes its ranks, under a lock so
// that one edge does the work; another edge that raced it writes the same
// ranks (they are a function of the key and the members).
func (s *Service) drawLottery(ctx context.Context, e catalog.Entry, rs stock.RoomSale) error {
	view := s.rooms.ensure(e.ProductID)
	key, commit := room.NewKey()
	o, err := s.d.Store.RoomFreeze(ctx, rs, key, commit)
	if err != nil {
		return err
	}
	if o.Ranked {
		view.ranked.Store(true)
		return nil
	}
	owner := fmt.Sprintf("node-%d", s.d.Node)
	got, err := s.d.Store.RoomLockRanks(ctx, e.ProductID, owner, 30*time.Second)
	if err != nil || !got {
		return err // another edge draws it; the next tick sees its result
	}
	ids, err := s.d.Store.RoomPrequeue(ctx, e.ProductID)
	if err != nil {
		return err
	}
	ranked, err := room.Rank(o.Key, ids)
	if err != nil {
		return fmt.Errorf("lottery key: %w", err)
	}
	if err := s.d.Store.RoomWriteRanks(ctx, rs, ranked); err != nil {
		return err
	}
	view.ranked.Store(true)
	s.d.Log.Info("waiting room opened: lottery drawn", "product", e.ProductID, "members", len(ranked),
		"commit", room.Commit(o.Key))
	return nil
}

// refreshRoom reads the admission state into the edge's view.
func (s *Service) refreshRoom(ctx context.Context, e catalog.Entry, nowMs int64) error {
	info, _, err := s.d.Store.RoomInfo(ctx, e.ProductID, nowMs)
	if err != nil {
		return err
	}
	if info.Rate < 0 {
		info.Rate = e.Room.AdmitPerMinute
	}
	if info.BaseMs < 0 {
		info.BaseMs = e.Room.StartMs
	}
	vs := stateOf(&info)
	view := s.rooms.ensure(e.ProductID)
	view.store(&vs)
	if info.Ranked {
		view.ranked.Store(true)
	}
	view.active.Store(info.Active)
	return nil
}

func (s *Service) registerRoomMetrics(reg *metrics.Registry) {
	each := func(f func(w *metrics.Writer, e catalog.Entry, v *roomView, vs *room.State, nowMs int64)) func(w *metrics.Writer) {
		return func(w *metrics.Writer) {
			nowMs := s.d.Now() / 1e6
			for _, e := range s.d.Sales.List() {
				if e.Room == nil {
					continue
				}
				v := s.rooms.ensure(e.ProductID)
				vs := v.state.Load()
				if vs == nil {
					vs = &room.State{Rate: e.Room.AdmitPerMinute, BaseMs: e.Room.StartMs}
				}
				f(w, e, v, vs, nowMs)
			}
		}
	}
	label := func(e catalog.Entry) metrics.Label { return metrics.Label{Name: "product", Value: e.ProductID} }
	reg.Register("flashgate_waitroom_waiting", "Shoppers in a sale's queue not yet let in, as this edge last read it.", "gauge",
		each(func(w *metrics.Writer, e catalog.Entry, _ *roomView, vs *room.State, nowMs int64) {
			w.Value(float64(vs.Waiting(nowMs)), label(e))
		}))
	reg.Register("flashgate_waitroom_admitted", "Shoppers let in so far.", "gauge",
		each(func(w *metrics.Writer, e catalog.Entry, _ *roomView, vs *room.State, _ int64) {
			w.Value(float64(vs.Admitted), label(e))
		}))
	reg.Register("flashgate_waitroom_active", "Shoppers let in whose session runs and who have not bought.", "gauge",
		each(func(w *metrics.Writer, e catalog.Entry, v *roomView, _ *room.State, _ int64) {
			w.Value(float64(v.active.Load()), label(e))
		}))
	reg.Register("flashgate_waitroom_admit_per_minute", "The admission rate in force (0 while paused).", "gauge",
		each(func(w *metrics.Writer, e catalog.Entry, _ *roomView, vs *room.State, _ int64) {
			r := vs.Rate
			if vs.Paused {
				r = 0
			}
			w.Value(float64(r), label(e))
		}))
	reg.Register("flashgate_waitroom_joins_total", "Queue joins on this edge by result.", "counter",
		each(func(w *metrics.Writer, e catalog.Entry, v *roomView, _ *room.State, _ int64) {
			for i := range v.joins {
				w.Value(float64(v.joins[i].Value()), label(e), metrics.Label{Name: "result", Value: joinResultNames[i]})
			}
		}))
}
