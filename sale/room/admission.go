package room

// State is a sale's admission state as Redis holds it
// (orders/stock.RoomState): the same numbers on every edge, so every edge
// computes the same frontier.
type State struct {
	// Frozen: the opening has passed and the pre-queue's Members are known;
	// Ranked: the lottery's ranks are written.
	Frozen, Ranked bool
	Members        int64
	// Joined is every ticket given (the pre-queue's and the FIFO ones).
	Joined int64
	// The admission line: N(t) = Base + floor(Rate*(t-BaseMs)/60000),
	// standing still while Paused.
	Base, BaseMs, Rate int64
	Paused, Closed     bool
	// Admitted counts the shoppers let in so far.
	Admitted int64
}

// Frontier is N(t): the highest place let in at nowMs, before the cap of
// active shoppers. Nobody is let in before the line starts (BaseMs).
func (s *State) Frontier(nowMs int64) int64 {
	if s.Paused || nowMs <= s.BaseMs || s.Rate <= 0 {
		return s.Base
	}
	return s.Base + s.Rate*(nowMs-s.BaseMs)/60000
}

// ETA is how long until place pos is let in at the current rate, in ms:
// 0 for a place already inside the line, -1 when admission is paused
// (no estimate).
func (s *State) ETA(pos, nowMs int64) int64 {
	n := s.Frontier(nowMs)
	if pos <= n {
		return 0
	}
	if s.Paused || s.Rate <= 0 {
		return -1
	}
	// The time the line reaches pos, from the line's own origin, so that
	// every edge and every poll gives the same estimate.
	at := s.BaseMs + ((pos-s.Base)*60000+s.Rate-1)/s.Rate
	return max(at-nowMs, 0)
}

// Waiting is how many places are given and not yet let in.
func (s *State) Waiting(nowMs int64) int64 {
	if !s.Frozen {
		return s.Joined
	}
	return max(s.Joined-s.Frontier(nowMs), 0)
}
