package sale

import (
	"context"
	"testing"
	"time"

	"flashgate/sale/catalog"
)

// TestBackOnSaleForgetsTheSoldOutFlagAndTheLimitAnswers: the one function
// every release, restock and sold-out-clear broadcast goes through clears
// the flag and makes the bought cache's "at the limit" answers of the
// product unreachable (a new generation), and says whether the flag was
// set. No broadcast: no Redis needed.
func TestBackOnSaleForgetsTheSoldOutFlagAndTheLimitAnswers(t *testing.T) {
	bought, err := catalog.NewBoughtCache(1024, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	svc := New(Deps{Sales: catalog.NewRegistry(), Bought: bought})
	st := svc.d.Sales.StateOf("p")
	st.SetSoldOut(true)
	p, u := []byte("p"), []byte("u")
	bought.Set(p, u, st.Generation(), 2)

	if !svc.backOnSale(context.Background(), "p", false) {
		t.Error("backOnSale reported the flag was not set")
	}
	if st.SoldOut() {
		t.Error("sold-out flag still set")
	}
	if n := bought.Get(p, u, st.Generation()); n != 0 {
		t.Errorf("bought cache still answers %d units for the product", n)
	}
	if svc.backOnSale(context.Background(), "p", false) {
		t.Error("a second backOnSale reported a change")
	}
}
