package stock

import (
	"slices"
	"strings"
	"testing"
)

func TestChangeRoundTrip(t *testing.T) {
	base := int64(7_340_032_123_456_789_012 >> 1)
	for _, tc := range []struct {
		name string
		kind ChangeKind
		ids  []int64
	}{
		{"one", KindStored, []int64{base}},
		{"batch unsorted", KindStored, []int64{base + 9, base, base + 3, base + 1}},
		{"duplicates", KindCancelled, []int64{base, base, base + 1}},
		{"small and large", KindStored, []int64{1, maxID}},
		{"expired", KindExpired, []int64{base, base + 2}},
		{"paid", KindPaid, []int64{base}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := slices.Clone(tc.ids)
			msg := string(appendChange(nil, tc.kind, "p-1_x", tc.ids))
			if !slices.Equal(tc.ids, orig) {
				t.Fatalf("appendSettled reordered the caller's ids: %v", tc.ids)
			}
			st, ok := parseChange(msg, nil)
			want := slices.Sorted(slices.Values(tc.ids))
			if !ok || st.Kind != tc.kind || st.ProductID != "p-1_x" || !slices.Equal(st.OrderIDs, want) {
				t.Fatalf("parse(%q) = %+v %v, want %c p-1_x %v", msg, st, ok, tc.kind, want)
			}
		})
	}
}

// A batch of 500 ids issued within a few milliseconds by one node costs a
// few bytes per order, not 20.
func TestChangeIsCompact(t *testing.T) {
	ids := make([]int64, 500)
	for i := range ids {
		ids[i] = (int64(123456789+i/200) << 22) | 5<<12 | int64(i%200)
	}
	msg := appendChange(nil, KindStored, "hot", ids)
	if perOrder := float64(len(msg)) / float64(len(ids)); perOrder > 4 {
		t.Fatalf("%d bytes for %d orders (%.1f per order), want at most 4 per order", len(msg), len(ids), perOrder)
	}
}

func TestChangeRejectsMalformed(t *testing.T) {
	for _, msg := range []string{
		"", "S", "Shot", "Shot ", "Xhot 1", "S 1", "S{p} 1", "Shot 1,", "Shot ,1", "Shot 1,,2",
		"Shot 0", "Shot -1", "Shot 1 2", "Shot 1,a", "Shot 99999999999999999999",
		"Shot 9223372036854775807,1", "S" + strings.Repeat("p", 65) + " 1",
	} {
		if st, ok := parseChange(msg, nil); ok {
			t.Errorf("parse(%q) accepted: %+v", msg, st)
		}
	}
}

// Every edge parses every message on the channel: once its id buffer has
// grown, parsing allocates nothing.
func TestChangeParseAllocs(t *testing.T) {
	ids := make([]int64, 500)
	for i := range ids {
		ids[i] = int64(5000 + i)
	}
	msg := string(appendChange(nil, KindStored, "p1", ids))
	buf := make([]int64, 0, len(ids))
	if a := testing.AllocsPerRun(50, func() {
		st, ok := parseChange(msg, buf)
		if !ok || len(st.OrderIDs) != len(ids) {
			t.Fatal("not parsed")
		}
		buf = st.OrderIDs[:0]
	}); a != 0 {
		t.Errorf("a message of 500 ids: %.1f allocations, want 0", a)
	}
}

func FuzzParseSettled(f *testing.F) {
	f.Add("Shot 123,1,2")
	f.Add("Rp1 9223372036854775807")
	f.Add("Sa 1,0,0")
	f.Fuzz(func(t *testing.T, msg string) {
		st, ok := parseChange(msg, nil)
		if !ok {
			return
		}
		ids := st.OrderIDs
		for i, id := range ids {
			if id <= 0 || (i > 0 && id < ids[i-1]) {
				t.Fatalf("parse(%q): id %d out of order or not positive: %v", msg, id, ids)
			}
		}
		// What parses re-encodes to something that parses the same.
		again := string(appendChange(nil, st.Kind, st.ProductID, ids))
		st2, ok2 := parseChange(again, nil)
		if !ok2 || st2.Kind != st.Kind || st2.ProductID != st.ProductID || !slices.Equal(ids, st2.OrderIDs) {
			t.Fatalf("parse(%q) = %v; re-encoded %q parses to %v", msg, ids, again, st2.OrderIDs)
		}
	})
}
