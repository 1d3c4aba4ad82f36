package catalog

import (
	"runtime"
	"testing"
	"time"
)

// BoughtCache.Get runs on every purchase attempt and must not allocate,
// not even now and then: AllocsPerRun rounds an allocation every 64 calls
// down to 0, so the process's malloc count over many calls is the measure.
func TestBoughtCacheGetNoAmortizedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	bc, err := NewBoughtCache(1<<12, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p, u := []byte("p1"), []byte("shopper-1")
	bc.Get(p, u, 0)
	const runs = 64 * 100
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		bc.Get(p, u, 0)
	}
	runtime.ReadMemStats(&after)
	if n := after.Mallocs - before.Mallocs; n != 0 {
		t.Fatalf("%d allocations (%d bytes) in %d Gets; AllocsPerRun says %v", n, after.TotalAlloc-before.TotalAlloc, runs,
			testing.AllocsPerRun(runs, func() { bc.Get(p, u, 0) }))
	}
}
