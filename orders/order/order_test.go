package order

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	good := Order{ID: 42, ProductID: "p1", UserID: "alice", Qty: 2, PriceCents: 9900, CreatedMs: 1796038487397, Edge: 3}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Order)
	}{
		{"no id", func(o *Order) { o.ID = 0 }},
		{"negative id", func(o *Order) { o.ID = -1 }},
		{"empty product", func(o *Order) { o.ProductID = "" }},
		{"brace in product", func(o *Order) { o.ProductID = "a}b" }},
		{"long product", func(o *Order) { o.ProductID = strings.Repeat("p", MaxProductIDLen+1) }},
		{"empty user", func(o *Order) { o.UserID = "" }},
		{"long user", func(o *Order) { o.UserID = strings.Repeat("u", MaxUserIDLen+1) }},
		{"zero qty", func(o *Order) { o.Qty = 0 }},
		{"qty above the contract", func(o *Order) { o.Qty = MaxQty + 1 }},
		{"negative price", func(o *Order) { o.PriceCents = -1 }},
		{"no created time", func(o *Order) { o.CreatedMs = 0 }},
		{"negative edge", func(o *Order) { o.Edge = -1 }},
		{"edge beyond the node ids", func(o *Order) { o.Edge = 1024 }},
		{"pay deadline at creation", func(o *Order) { o.PayByMs = o.CreatedMs }},
		{"pay deadline before creation", func(o *Order) { o.PayByMs = o.CreatedMs - 1 }},
		{"negative pay deadline", func(o *Order) { o.PayByMs = -1 }},
	} {
		o := good
		tc.mod(&o)
		if err := o.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %+v: %v, want ErrInvalid", tc.name, o, err)
		}
	}
	edge := good
	edge.ProductID, edge.UserID = strings.Repeat("p", MaxProductIDLen), strings.Repeat("u", MaxUserIDLen)
	edge.Qty, edge.PriceCents, edge.Edge = MaxQty, 0, 1023
	if err := edge.Validate(); err != nil {
		t.Errorf("limits themselves refused: %v", err)
	}
	edge.PayByMs = edge.CreatedMs + 1
	if err := edge.Validate(); err != nil {
		t.Errorf("a deadline 1 ms after creation refused: %v", err)
	}
}

func TestValidateAllocs(t *testing.T) {
	o := Order{ID: 42, ProductID: "p1", UserID: "alice", Qty: 2, PriceCents: 9900, CreatedMs: 1796038487397, Edge: 3}
	if n := testing.AllocsPerRun(100, func() { _ = o.Validate() }); n != 0 {
		t.Fatalf("Validate allocates %v times", n)
	}
	p, u := []byte("sku-2024_red"), []byte("Alice_01.b@c-d")
	if n := testing.AllocsPerRun(100, func() { ValidProductID(p); ValidUserID(u) }); n != 0 {
		t.Fatalf("the byte-slice checks allocate %v times", n)
	}
}

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
			if got := ValidProductID(tt.id); got != tt.want {
				t.Errorf("ValidProductID(string %q) = %v, want %v", tt.id, got, tt.want)
			}
		})
	}
}

var productIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

func FuzzValidProductID(f *testing.F) {
	for _, s := range []string{"p1", "_static", "_x", "", "a-b_c", strings.Repeat("z", 64), strings.Repeat("z", 65), "a\n", "A\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The regexp is the specification; `$` would also match before a
		// final newline, so rule that out explicitly.
		want := productIDRE.Match(b) && !bytes.HasSuffix(b, []byte("\n"))
		if got := ValidProductID(b); got != want {
			t.Fatalf("ValidProductID(%q) = %v, want %v", b, got, want)
		}
		if ValidProductID(string(b)) && (bytes.ContainsAny(b, "{}:/ .\"") || len(b) > 64) {
			t.Fatalf("accepted %q", b)
		}
	})
}

func TestValidUserID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{"a", true},
		{"Alice_01.b@c-d", true},
		{strings.Repeat("x", 64), true},
		{"", false},
		{strings.Repeat("x", 65), false},
		{"a b", false},
		{"a/b", false},
		{"a:b", false},
		{"a{b}", false},
		{"é", false},
		{"a\x00", false},
	}
	for _, tt := range tests {
		if got := ValidUserID(tt.id); got != tt.ok {
			t.Errorf("ValidUserID(%q) = %v", tt.id, got)
		}
		if got := ValidUserID([]byte(tt.id)); got != tt.ok {
			t.Errorf("ValidUserID([]byte(%q)) = %v", tt.id, got)
		}
	}
}
