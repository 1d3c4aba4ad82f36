package main

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"time"
)

// ETAAccuracy compares the estimates shoppers were shown with the waits
// they had: for each shopper admitted after at least minWaitS seconds of
// estimates, |etaMs − the real wait| / the real wait, taken at her first
// estimate after the opening (the join, for those who joined after it) and
// at the answer nearest half her wait. The real wait ends when she saw her
// admission, which a poll (1–2 s) trails the line by: that delay is in the
// error, as a shopper lives it.
type ETAAccuracy struct {
	N         int     `json:"n"`
	MinWaitS  float64 `json:"min_wait_s"`
	FirstP50  float64 `json:"first_p50_pct"`
	FirstP90  float64 `json:"first_p90_pct"`
	HalfP50   float64 `json:"half_p50_pct"`
	HalfP90   float64 `json:"half_p90_pct"`
	MedianLag float64 `json:"median_poll_lag_ms"` // the real wait minus the estimate, at the first estimate (median)
}

const etaMinWait = 5.0 // seconds: shorter waits are all poll delay

func (r *wrRun) etaAccuracy() ETAAccuracy {
	waits := make([]etaWait, 0, len(r.shoppers))
	for i := range r.shoppers {
		s := &r.shoppers[i]
		waits = append(waits, etaWait{admittedAt: s.admittedAt, etas: s.etas})
	}
	return etaAccuracyOf(waits)
}

// etaWait is one waiter's estimates and when she saw her admission (zero:
// never), the input of etaAccuracyOf: a sale room's shopper or a route
// room's visitor.
type etaWait struct {
	admittedAt time.Time
	etas       []etaSeen
}

func etaAccuracyOf(waits []etaWait) ETAAccuracy {
	a := ETAAccuracy{MinWaitS: etaMinWait}
	var first, half, lag []float64
	for _, s := range waits {
		if s.admittedAt.IsZero() || len(s.etas) == 0 {
			continue
		}
		e0 := s.etas[0]
		wait := float64(s.admittedAt.Sub(e0.at).Milliseconds())
		if wait < etaMinWait*1000 {
			continue
		}
		first = append(first, 100*math.Abs(float64(e0.eta)-wait)/wait)
		lag = append(lag, wait-float64(e0.eta))
		mid := e0.at.Add(s.admittedAt.Sub(e0.at) / 2)
		best := e0
		for _, e := range s.etas {
			if math.Abs(float64(e.at.Sub(mid))) < math.Abs(float64(best.at.Sub(mid))) {
				best = e
			}
		}
		w2 := float64(s.admittedAt.Sub(best.at).Milliseconds())
		if w2 > 0 {
			half = append(half, 100*math.Abs(float64(best.eta)-w2)/w2)
		}
	}
	a.N = len(first)
	if a.N == 0 {
		return a
	}
	sort.Float64s(first)
	sort.Float64s(half)
	sort.Float64s(lag)
	a.FirstP50, a.FirstP90 = quantile(first, 0.5), quantile(first, 0.9)
	a.HalfP50, a.HalfP90 = quantile(half, 0.5), quantile(half, 0.9)
	a.MedianLag = quantile(lag, 0.5)
	return a
}

// solvePow finds a decimal nonce such that SHA-256(challenge + ":" +
// nonce) starts with bits zero bits, as the page's worker does.
func solvePow(challenge string, zeros int) string {
	buf := []byte(challenge + ":")
	n := len(buf)
	for i := uint64(0); ; i++ {
		buf = strconv.AppendUint(buf[:n], i, 10)
		sum := sha256.Sum256(buf)
		if bits.LeadingZeros32(binary.BigEndian.Uint32(sum[:4])) >= zeros {
			return string(buf[n:])
		}
	}
}
