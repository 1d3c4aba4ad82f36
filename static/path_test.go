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

func TestParsePath(t *testing.T) {
	tests := []struct {
		path      string
		id, asset string
		ok        bool
	}{
		{"/seckill/p1", "p1", "", true},
		{"/seckill/_static/app.js", "", "app.js", true},
		{"/seckill/_static/", "", "", false},
		{"/seckill/_static", "", "", false}, // "_static" is not a product id
		{"/seckill/", "", "", false},
		{"/seckill", "", "", false},
		{"/seckill/p1/", "", "", false},
		{"/seckill/p1/x", "", "", false},
		{"/seckill/-p", "", "", false},
		{"/api/seckill/status", "", "", false},
		{"/", "", "", false},
		{"/seckill/_static/../x", "", "../x", true}, // ServeAsset 404s it: not in the set
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			id, asset, ok := ParsePath([]byte(tt.path))
			if ok != tt.ok || string(id) != tt.id || string(asset) != tt.asset {
				t.Errorf("ParsePath(%q) = %q, %q, %v; want %q, %q, %v", tt.path, id, asset, ok, tt.id, tt.asset, tt.ok)
			}
		})
	}
}

func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/seckill/p1", "/seckill/_static/app.js", "/seckill/", "/x", "/seckill/_static/", "/seckill/_static/../../etc/passwd"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		id, asset, ok := ParsePath(b)
		if !ok {
			if id != nil || asset != nil {
				t.Fatalf("ParsePath(%q): not ok but returned %q, %q", b, id, asset)
			}
			return
		}
		if (id == nil) == (asset == nil) {
			t.Fatalf("ParsePath(%q): exactly one of id %q and asset %q must be set", b, id, asset)
		}
		if id != nil && (!ValidProductID(id) || string(b) != "/seckill/"+string(id)) {
			t.Fatalf("ParsePath(%q): bad id %q", b, id)
		}
		if asset != nil && (len(asset) == 0 || string(b) != AssetPath+string(asset)) {
			t.Fatalf("ParsePath(%q): bad asset %q", b, asset)
		}
	})
}

func TestParsePathAllocs(t *testing.T) {
	p := []byte("/seckill/_static/app.js")
	q := []byte("/seckill/sku-1")
	if n := testing.AllocsPerRun(100, func() { ParsePath(p); ParsePath(q) }); n != 0 {
		t.Fatalf("ParsePath allocates %v times", n)
	}
}
