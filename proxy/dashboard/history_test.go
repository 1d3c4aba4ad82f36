package dashboard

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func frameAt(ms int64, ids ...string) *Frame {
	f := &Frame{TimeMs: ms, Outbox: ms / 1000, Lag: -1, N: len(ids)}
	for k, id := range ids {
		f.IDs[k] = id
		f.P[k] = ProductSample{Attempts: uint32(ms / 1000), P50: 1, P99: 2, Left: 100 - ms/1000, Unpaid: -1, Paid: -1, Expired: -1, Waiting: -1, Admitted: -1, Active: -1}
		f.P[k].Codes[CodeIndex(200)] = uint32(ms / 1000)
	}
	return f
}

// TestHistoryAddAllocs: once a sale has its slot, a second costs the edge
// no allocation however long it runs (the ring wraps in place).
func TestHistoryAddAllocs(t *testing.T) {
	h := NewHistory()
	f := frameAt(1000, "p1", "p2")
	h.Add(f) // the slots' first sight allocates their series, once
	ms := int64(1000)
	allocs := testing.AllocsPerRun(3*HistoryLen, func() {
		ms += 1000
		f.TimeMs = ms
		f.P[0].Attempts++
		h.Add(f)
	})
	if allocs != 0 {
		t.Fatalf("Add allocates %v per sample in steady state, want 0", allocs)
	}
	marks := testing.AllocsPerRun(3*historyMarks, func() {
		h.Mark(Mark{TimeMs: ms, Kind: MarkDegradeOn, Product: "p1"})
	})
	if marks != 0 {
		t.Fatalf("Mark allocates %v, want 0", marks)
	}
}

func TestHistoryRingKeepsTheLastWindow(t *testing.T) {
	h := NewHistory()
	for s := int64(1); s <= HistoryLen+100; s++ {
		ids := []string{"p1"}
		if s > HistoryLen { // p2 appears late
			ids = append(ids, "p2")
		}
		h.Add(frameAt(s*1000, ids...))
	}
	h.Mark(Mark{TimeMs: 500, Kind: MarkReload, Version: 2})
	h.Mark(Mark{TimeMs: (HistoryLen + 50) * 1000, Kind: MarkBreakerOpen, Product: "p2"})
	v := h.View(0)
	if len(v.T) != HistoryLen || v.T[0] != 101*1000 || v.T[len(v.T)-1] != (HistoryLen+100)*1000 {
		t.Fatalf("window: %d seconds from %d to %d, want %d from 101000", len(v.T), v.T[0], v.T[len(v.T)-1], HistoryLen)
	}
	byID := map[string]ProductSeries{}
	for _, p := range v.Products {
		byID[p.ProductID] = p
	}
	p1, p2 := byID["p1"], byID["p2"]
	if len(p1.Attempts) != HistoryLen || p1.Attempts[0] != 101 || p1.Codes[0][HistoryLen-1] != HistoryLen+100 {
		t.Fatalf("p1 series wrong: first %d, last 200s %d", p1.Attempts[0], p1.Codes[0][HistoryLen-1])
	}
	if p2.Left[0] != -1 || p2.Left[HistoryLen-1] != 100-(HistoryLen+100) {
		t.Fatalf("p2 absent before it appeared must read -1: first %d last %d", p2.Left[0], p2.Left[HistoryLen-1])
	}
	if len(v.Marks) != 2 {
		t.Fatalf("marks %v", v.Marks)
	}

	// since: only the newer seconds and marks.
	inc := h.View((HistoryLen + 98) * 1000)
	if len(inc.T) != 2 || len(inc.Marks) != 0 || len(inc.Products) != 2 || len(inc.Products[0].Attempts) != 2 {
		t.Fatalf("incremental view: %+v", inc)
	}
	b, err := json.Marshal(h.View(1 << 60))
	if err != nil || !strings.Contains(string(b), `"t":[]`) || !strings.Contains(string(b), `"products":[]`) {
		t.Fatalf("an empty view must send lists: %s %v", b, err)
	}
}

func TestHistoryBoundsItsSales(t *testing.T) {
	h := NewHistory()
	f := &Frame{TimeMs: 1000, N: HistoryProducts}
	for k := range HistoryProducts {
		f.IDs[k] = fmt.Sprintf("p%d", k)
	}
	h.Add(f)
	// A new sale while every slot is in use is not charted, and said so.
	f.IDs[0] = "late"
	f.TimeMs = 2000
	h.Add(f)
	if v := h.View(0); v.Dropped != 1 || len(v.Products) != HistoryProducts {
		t.Fatalf("dropped %d, products %d", v.Dropped, len(v.Products))
	}
	// Once p0 has been gone for the whole window its slot is reused.
	f.TimeMs = 2000 + HistoryLen*1000 + 1000
	h.Add(f)
	v := h.View(0)
	if v.Dropped != 0 {
		t.Fatalf("p0's slot not reused: dropped %d", v.Dropped)
	}
	for _, p := range v.Products {
		if p.ProductID == "p0" {
			t.Fatalf("p0 still listed")
		}
	}
}

func TestCodeIndex(t *testing.T) {
	for i, c := range Codes {
		if CodeIndex(c) != i || codeNames[i] != fmt.Sprint(c) {
			t.Errorf("code %d: index %d name %s", c, CodeIndex(c), codeNames[i])
		}
	}
	for _, c := range []int{0, 400, 404, 500, 502} {
		if CodeIndex(c) != NumCodes-1 {
			t.Errorf("code %d not in other", c)
		}
	}
}
