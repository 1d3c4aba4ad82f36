package push

import (
	"slices"
	"strings"
	"testing"
)

func TestMessageRoundTrip(t *testing.T) {
	base := int64(7_340_032_123_456_789_012 >> 1)
	for _, tc := range []struct {
		name string
		kind byte
		ids  []int64
	}{
		{"one", kindStored, []int64{base}},
		{"batch unsorted", kindStored, []int64{base + 9, base, base + 3, base + 1}},
		{"duplicates", kindReleased, []int64{base, base, base + 1}},
		{"small and large", kindStored, []int64{1, maxID}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := slices.Clone(tc.ids)
			msg := string(appendMessage(nil, tc.kind, "p-1_x", tc.ids))
			if !slices.Equal(tc.ids, orig) {
				t.Fatalf("appendMessage reordered the caller's ids: %v", tc.ids)
			}
			kind, product, ids, ok := decodeMessage(msg, nil)
			want := slices.Sorted(slices.Values(tc.ids))
			if !ok || kind != tc.kind || product != "p-1_x" || !slices.Equal(ids, want) {
				t.Fatalf("decode(%q) = %c %q %v %v, want %c p-1_x %v", msg, kind, product, ids, ok, tc.kind, want)
			}
		})
	}
}

// A batch of 500 ids issued within a few milliseconds by one node costs a
// few bytes per order, not 20.
func TestMessageIsCompact(t *testing.T) {
	ids := make([]int64, 500)
	for i := range ids {
		ids[i] = (int64(123456789+i/200) << 22) | 5<<12 | int64(i%200)
	}
	msg := appendMessage(nil, kindStored, "hot", ids)
	if perOrder := float64(len(msg)) / float64(len(ids)); perOrder > 4 {
		t.Fatalf("%d bytes for %d orders (%.1f per order), want at most 4 per order", len(msg), len(ids), perOrder)
	}
}

func TestMessageRejectsMalformed(t *testing.T) {
	for _, msg := range []string{
		"", "S", "Shot", "Shot ", "Xhot 1", "S 1", "S{p} 1", "Shot 1,", "Shot ,1", "Shot 1,,2",
		"Shot 0", "Shot -1", "Shot 1 2", "Shot 1,a", "Shot 99999999999999999999",
		"Shot 9223372036854775807,1", "S" + strings.Repeat("p", 65) + " 1",
	} {
		if k, p, ids, ok := decodeMessage(msg, nil); ok {
			t.Errorf("decode(%q) accepted: %c %q %v", msg, k, p, ids)
		}
	}
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add("Shot 123,1,2")
	f.Add("Rp1 9223372036854775807")
	f.Add("Sa 1,0,0")
	f.Fuzz(func(t *testing.T, msg string) {
		kind, product, ids, ok := decodeMessage(msg, nil)
		if !ok {
			return
		}
		for i, id := range ids {
			if id <= 0 || (i > 0 && id < ids[i-1]) {
				t.Fatalf("decode(%q): id %d out of order or not positive: %v", msg, id, ids)
			}
		}
		// What decodes re-encodes to something that decodes the same.
		again := string(appendMessage(nil, kind, product, ids))
		k2, p2, ids2, ok2 := decodeMessage(again, nil)
		if !ok2 || k2 != kind || p2 != product || !slices.Equal(ids, ids2) {
			t.Fatalf("decode(%q) = %v; re-encoded %q decodes to %v", msg, ids, again, ids2)
		}
	})
}
