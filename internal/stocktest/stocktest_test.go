package stocktest

import (
	"context"
	"testing"
	"time"

	"flashgate/conf"
	"flashgate/orders/stock"
)

func TestOptionsDefaultsAndOverrides(t *testing.T) {
	o := Options()
	if o.Timeout != CallBudget || o.QueueTimeout != CallBudget || o.OrderTTL != conf.Defaults().Sale.OrderTTL {
		t.Fatalf("defaults %+v", o)
	}
	o = Options(Timeout(time.Second), OrderTTL(time.Hour), Snapshots("d", -1))
	if o.Timeout != time.Second || o.QueueTimeout != time.Second || o.OrderTTL != time.Hour || o.DataDir != "d" || o.SaveEvery != -1 {
		t.Fatalf("overrides %+v", o)
	}
	if o = Options(WithOptions(stock.Options{Timeout: 3})); o.Timeout != 3 || o.QueueTimeout != 0 || o.OrderTTL != 0 {
		t.Fatalf("WithOptions %+v", o)
	}
}

func TestOpenAndWarmOnTheEmbeddedServer(t *testing.T) {
	st := Open(t, "embedded")
	Warm(t, st, "kit-p", 7, 2)
	info, ok, err := st.SaleInfo(context.Background(), "kit-p")
	if err != nil || !ok || info.Remaining != 7 {
		t.Fatalf("after Warm: %+v %v %v", info, ok, err)
	}
}
