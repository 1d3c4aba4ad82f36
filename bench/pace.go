package main

import (
	"context"
	"math"
	"time"

	"go.uber.org/ratelimit"
)

// Pacer is the open-loop schedule: arrival j is intended at
// start + j/rate, whatever happened to earlier ones. The generator wakes
// once per tick (paced by go.uber.org/ratelimit) and releases every arrival
// whose intended time has come, so a late wake-up (a busy machine, a GC)
// never shifts the schedule: the lateness is counted in the latency of the
// requests it delayed (no coordinated omission).
type Pacer struct {
	Rate  float64       // arrivals per second (> 0)
	Burst int           // arrivals intended at start itself, before the paced ones
	Total int64         // paced arrivals in all (rate × duration)
	Tick  time.Duration // wake-up interval
}

// NewPacer schedules rate arrivals per second for d, plus burst at once.
// The tick is at least minTick and covers at least one arrival.
func NewPacer(rate float64, burst int, d, minTick time.Duration) Pacer {
	p := Pacer{Rate: rate, Burst: burst}
	if rate > 0 {
		p.Total = int64(math.Round(rate * d.Seconds()))
		p.Tick = max(minTick, time.Duration(float64(time.Second)/rate))
	} else {
		p.Tick = minTick
	}
	return p
}

// PerTick is the average number of arrivals released per wake-up.
func (p Pacer) PerTick() float64 { return p.Rate * p.Tick.Seconds() }

// Intended is the offset from the start at which arrival j (0-based,
// bursts first) is due.
func (p Pacer) Intended(j int64) time.Duration {
	if j < int64(p.Burst) {
		return 0
	}
	j -= int64(p.Burst)
	return time.Duration(float64(j) * float64(time.Second) / p.Rate)
}

// Due is how many arrivals are due by elapsed (including the burst).
func (p Pacer) Due(elapsed time.Duration) int64 {
	n := int64(p.Burst)
	if p.Rate > 0 && elapsed >= 0 {
		// Arrival j is due when j/rate <= elapsed.
		n += min(p.Total, int64(math.Floor(elapsed.Seconds()*p.Rate))+1)
	}
	return n
}

// All is the number of arrivals of the whole schedule.
func (p Pacer) All() int64 { return int64(p.Burst) + p.Total }

// Run calls release(j, intended) for every arrival in order, at (or as
// soon as possible after) its intended time, until the schedule ends or
// ctx is done. It returns the number released.
func (p Pacer) Run(ctx context.Context, start time.Time, release func(j int64, intended time.Time)) int64 {
	rl := ratelimit.New(1, ratelimit.Per(p.Tick), ratelimit.WithoutSlack)
	var next int64
	all := p.All()
	if d := time.Until(start); d > 0 {
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(d):
		}
	}
	for next < all {
		if ctx.Err() != nil {
			return next
		}
		rl.Take()
		due := min(all, p.Due(time.Since(start)))
		for ; next < due; next++ {
			release(next, start.Add(p.Intended(next)))
		}
	}
	return next
}
