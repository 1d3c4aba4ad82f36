package main

import (
	"testing"
	"time"
)

// samplesOf is n samples every 10 s whose edge1 RSS is f(t).
func samplesOf(n int, f func(t float64) float64) []SoakSample {
	var out []SoakSample
	for i := range n {
		t := float64(i * 10)
		out = append(out, SoakSample{T: t, Edges: []EdgeSample{{RSSMB: f(t), Goroutines: 100, FDs: 50}}})
	}
	return out
}

func TestFlatnessJudgesTheSecondHalf(t *testing.T) {
	rss := soakResources(1)[0] // edge1 RSS: 10% of the mean + 4 MB
	cases := []struct {
		name string
		f    func(t float64) float64
		flat bool
	}{
		{"warm-up then flat", func(t float64) float64 { return min(40+t, 100) + float64(int(t)%20)/10 }, true},
		{"falling", func(t float64) float64 { return 200 - t/2 }, true},
		{"growing steadily", func(t float64) float64 { return 50 + t/5 }, false},
		{"growing after the warm-up", func(t float64) float64 { return 60 + max(0, t-90)/2 }, false},
	}
	for _, c := range cases {
		got := flatness(rss, samplesOf(19, c.f), 180)
		if got.Flat != c.flat {
			t.Errorf("%s: flat=%v (growth %.1f, bound %.1f), want %v", c.name, got.Flat, got.Growth, got.Bound, c.flat)
		}
	}
	if got := flatness(rss, samplesOf(3, func(float64) float64 { return 50 }), 180); got.Flat {
		t.Error("3 samples over 180 s (1 after the warm-up) judged flat: too few to show anything")
	}
	edgeDown := samplesOf(19, func(float64) float64 { return 50 })
	for i := range edgeDown[10:] {
		edgeDown[10+i].Edges[0].RSSMB = -1 // unreadable: left out, not zero
	}
	if got := flatness(rss, edgeDown, 180); got.Flat {
		t.Error("a second half of unreadable samples judged flat")
	}
}

func TestDrawFaultsNewKindsTargets(t *testing.T) {
	kinds := []string{fRedisStale, fLinkSlow, fLinkCut, fEdgeClock}
	seen := map[string]bool{}
	for seed := int64(0); seed < 100; seed++ {
		for _, f := range drawFaults(seed, 6, 40*time.Second, 3, 2, 5, 3, kinds) {
			seen[f.Kind] = true
			switch f.Kind {
			case fEdgeClock:
				if f.Skew != 2*time.Second && f.Skew != -2*time.Second {
					t.Fatalf("seed %d: %s: skew %v, want ±2s", seed, f, f.Skew)
				}
				fallthrough
			case fLinkSlow, fLinkCut:
				if f.Target < 0 || f.Target >= 3 || f.group != "edge"+string(rune('0'+f.Target)) {
					t.Fatalf("seed %d: %s: target %d group %q", seed, f, f.Target, f.group)
				}
			case fRedisStale:
				if f.Target < 0 || f.Target >= 5 || f.group != "redis" {
					t.Fatalf("seed %d: %s: target %d group %q", seed, f, f.Target, f.group)
				}
			}
		}
	}
	for _, k := range kinds {
		if !seen[k] {
			t.Errorf("%s never drawn in 100 seeds", k)
		}
	}
}
