package api

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/valyala/fasthttp"

	"flashgate/sale/catalog"
)

// Reset must clear every field but the buffers it owns, so a pooled Call
// never shows a request a view of the previous one's memory.
func TestResetClearsEveryField(t *testing.T) {
	c := Call{
		Ctx: new(fasthttp.RequestCtx), ClientIP: netip.MustParseAddr("192.0.2.1"), NowNano: 1,
		UserID: []byte("u"), ProductID: []byte("p"), Endpoint: EndpointDo, Qty: 2, Token: []byte("t"), OrderID: 3,
		Sale: catalog.Entry{Sale: &catalog.Sale{}}, TokenNonce: [12]byte{1}, TokenExpiresMs: 4,
		Checked: SignedIn | TokenValid,
		Scratch: make([]byte, 5, 64),
	}
	c.SetUser(append(c.UserBuf(), "alice"...))
	c.Reset()
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		switch f.Name {
		case "Scratch":
			if len(c.Scratch) != 0 || cap(c.Scratch) != 64 {
				t.Errorf("Scratch: len %d cap %d, want emptied with its capacity", len(c.Scratch), cap(c.Scratch))
			}
		case "userBuf":
			if string(c.UserBuf()) != "" || cap(c.UserBuf()) == 0 {
				t.Error("userBuf: want emptied with its capacity")
			}
		default:
			if !v.Field(i).IsZero() {
				t.Errorf("%s not reset", f.Name)
			}
		}
	}
}

func TestSetUser(t *testing.T) {
	var c Call
	c.SetUser(append(c.UserBuf(), "alice"...))
	if string(c.UserID) != "alice" {
		t.Fatalf("UserID %q", c.UserID)
	}
	buf := c.UserBuf()
	c.Reset()
	c.SetUser(append(c.UserBuf(), "bob"...))
	if string(c.UserID) != "bob" || &c.UserID[0] != &buf[:1][0] {
		t.Fatal("the second user must reuse the buffer")
	}
}
