package static

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestValidProductID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"p1", true},
		{"A", true},
		{"9", true},
		{"sku-2024_red", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{"_static", false},
		{"-p", false},
		{"p/1", false},
		{"p.1", false},
		{"..", false},
		{"p 1", false},
		{"p%31", false},
		{"p\x00", false},
		{"é", false},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			if got := ValidProductID([]byte(tt.id)); got != tt.want {
				t.Errorf("ValidProductID(%q) = %v, want %v", tt.id, got, tt.want)
			}
		})
	}
}

var productIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

func FuzzValidProductID(f *testing.F) {
	for _, s := range []string{"p1", "_static", "", "a-b_c", strings.Repeat("z", 64), strings.Repeat("z", 65), "a\n", "A\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The regexp is the specification; `$` would also match before a
		// final newline, so rule that out explicitly.
		want := productIDRE.Match(b) && !bytes.HasSuffix(b, []byte("\n"))
		if got := ValidProductID(b); got != want {
			t.Fatalf("ValidProductID(%q) = %v, want %v", b, got, want)
		}
	})
}
