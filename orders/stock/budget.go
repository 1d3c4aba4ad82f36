package stock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// budgetCtx is a reusable context carrying one script call's deadline.
// context.WithDeadline costs five allocations per call (context, timer,
// done channel); this one is pooled together with its timer and channel,
// and reused whenever its timer was stopped before firing — the normal
// case. rueidis does not keep a context after Do returns.
type budgetCtx struct {
	dl    time.Time
	done  chan struct{}
	timer *time.Timer
	fired atomic.Bool
}

var budgetPool sync.Pool

func newBudget(deadline time.Time) *budgetCtx {
	b, _ := budgetPool.Get().(*budgetCtx)
	if b == nil {
		b = &budgetCtx{done: make(chan struct{})}
		b.timer = time.AfterFunc(time.Hour, b.fire)
	}
	b.dl = deadline
	b.timer.Reset(time.Until(deadline))
	return b
}

func (b *budgetCtx) fire() {
	b.fired.Store(true) // before close: Err must be set once Done is closed
	close(b.done)
}

// end releases b. A fired (or firing) budget has a closed channel and is
// dropped; Stop reporting true guarantees fire will not run, so the
// channel is still open and b can be reused.
func (b *budgetCtx) end() {
	if b.timer.Stop() {
		budgetPool.Put(b)
	}
}

func (b *budgetCtx) Deadline() (time.Time, bool) { return b.dl, true }
func (b *budgetCtx) Done() <-chan struct{}       { return b.done }
func (b *budgetCtx) Value(any) any               { return nil }
func (b *budgetCtx) Err() error {
	if b.fired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}
