package sale

import (
	"context"
	"errors"

	"flashgate/orders/stock"
	"flashgate/sale/catalog"
)

// RoomLottery is the lottery with its full ranking, for the operator's
// audit (GET /admin/waitroom/lottery).
func (s *Service) RoomLottery(ctx context.Context, productID string) (Lottery, error) {
	e, ok := s.d.Sales.GetString(productID)
	if !ok || e.Room == nil {
		return Lottery{}, ErrNoRoom
	}
	l, err := s.roomLottery(ctx, e, e.Room, s.d.Now()/1e6)
	if err != nil {
		return Lottery{}, err
	}
	if l.Ranked && l.Members > 0 {
		if l.Ranking, err = s.d.Store.RoomRanking(ctx, productID); err != nil {
			return Lottery{}, err
		}
	}
	return l, nil
}

// ErrNoRoom: the product is unknown or has no waiting room.
var ErrNoRoom = errors.New("no such sale with a waiting room")

// RoomRow is one sale's room for the operator (GET /admin/waitroom).
type RoomRow struct {
	ProductID      string `json:"productId"`
	Enabled        bool   `json:"enabled"`
	Status         string `json:"status"`
	Order          string `json:"order"`
	Joined         int64  `json:"joined"`
	Waiting        int64  `json:"waiting"`
	Admitted       int64  `json:"admitted"`
	Active         int64  `json:"active"`
	MaxActive      int64  `json:"maxActive"`
	AdmitPerMinute int64  `json:"admitPerMinute"`
	// Frontier is N(t), the highest place let in.
	Frontier int64 `json:"frontier"`
	// EtaMs is the wait of the last shopper in line (-1: paused).
	EtaMs    int64  `json:"etaMs"`
	Paused   bool   `json:"paused"`
	Closed   bool   `json:"closed"`
	SoldOut  bool   `json:"soldOut"`
	OpensMs  int64  `json:"opensMs"`
	StartMs  int64  `json:"startMs"`
	Commit   string `json:"commit"`
	Members  int64  `json:"members"`
	Ranked   bool   `json:"ranked"`
	Sessions int64  `json:"sessionMs"`
}

// Rooms is every room of the sales this edge knows, from Redis.
func (s *Service) Rooms(ctx context.Context) ([]RoomRow, error) {
	nowMs := s.d.Now() / 1e6
	var rows []RoomRow
	for _, e := range s.d.Sales.List() {
		if e.Room == nil {
			continue
		}
		row, err := s.roomRow(ctx, e, nowMs)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func (s *Service) roomRow(ctx context.Context, e catalog.Entry, nowMs int64) (RoomRow, error) {
	info, _, err := s.d.Store.RoomInfo(ctx, e.ProductID, nowMs)
	if err != nil {
		return RoomRow{}, err
	}
	rm := e.Room
	if info.Rate < 0 {
		info.Rate = rm.AdmitPerMinute
	}
	if info.BaseMs < 0 {
		info.BaseMs = rm.StartMs
	}
	vs := stateOf(&info)
	row := RoomRow{ProductID: e.ProductID, Enabled: true, Order: rm.Order.String(), Joined: info.Joined,
		Waiting: vs.Waiting(nowMs), Admitted: info.Admitted, Active: info.Active, MaxActive: rm.MaxActive,
		AdmitPerMinute: info.Rate, Paused: info.Paused, Closed: info.Closed, SoldOut: e.SoldOut(),
		OpensMs: rm.OpensMs, StartMs: rm.StartMs, Commit: info.Commit, Members: info.Members,
		Ranked: info.Ranked, Sessions: rm.SessionMs}
	if info.Frozen {
		row.Frontier = min(vs.Frontier(nowMs), info.Joined)
	}
	row.EtaMs = vs.ETA(info.Joined, nowMs)
	switch {
	case nowMs >= e.EndMs:
		row.Status = "ended"
	case e.SoldOut():
		row.Status = "soldout"
	case info.Closed:
		row.Status = "closed"
	case nowMs < rm.OpensMs:
		row.Status = "upcoming"
	case nowMs < rm.StartMs:
		row.Status = "prequeue"
	case info.Paused:
		row.Status = "paused"
	default:
		row.Status = "open"
	}
	return row, nil
}

// RoomAction applies an operator's action to a sale's room: pause,
// resume, close, open (undo close) or rate (admitPerMinute), live on every
// edge (they read the line from Redis).
func (s *Service) RoomAction(ctx context.Context, productID, action string, rate int64) (RoomRow, error) {
	e, ok := s.d.Sales.GetString(productID)
	if !ok || e.Room == nil {
		return RoomRow{}, ErrNoRoom
	}
	nowMs := s.d.Now() / 1e6
	if _, err := s.d.Store.RoomAdmin(ctx, roomSaleOf(e.Sale), stock.RoomAction(action), rate, nowMs); err != nil {
		return RoomRow{}, err
	}
	// This edge follows at once; the others at their next tick.
	if err := s.refreshRoom(ctx, e, nowMs); err != nil {
		return RoomRow{}, err
	}
	return s.roomRow(ctx, e, nowMs)
}

// RoomFigures is one room as this edge last read it (its tending, every
// 250 ms), from memory: for the dashboard's charts and the sale's
// timeline. ok is false for a sale without a room.
type RoomFigures struct {
	Joined, Waiting, Admitted, Active int64
}

// RoomFigures reads e's room from memory; no Redis call.
func (s *Service) RoomFigures(e catalog.Entry, nowMs int64) (RoomFigures, bool) {
	if e.Room == nil {
		return RoomFigures{}, false
	}
	v := s.rooms.get([]byte(e.ProductID))
	if v == nil {
		return RoomFigures{}, true
	}
	vs := v.state.Load()
	if vs == nil {
		return RoomFigures{Active: v.active.Load()}, true
	}
	return RoomFigures{Joined: vs.Joined, Waiting: vs.Waiting(nowMs), Admitted: vs.Admitted, Active: v.active.Load()}, true
}
