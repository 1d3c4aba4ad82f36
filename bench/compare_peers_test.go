package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"flashgate/orders/stock"
)

// TestPeersCallTheScriptThroughStock: the OpenResty peer's conf leaves the
// deduction call to bench (__DEDUCT_CALL__, written from stock.DeductCall)
// and names no key itself; redis-benchmark's call is stock.DeductCall's for
// the bench product.
func TestPeersCallTheScriptThroughStock(t *testing.T) {
	conf, err := os.ReadFile(filepath.Join("..", openrestyPeerConf))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(conf), "__DEDUCT_CALL__"); n != 2 { // the header's note and the call
		t.Errorf("%s names __DEDUCT_CALL__ %d times, want the note and the call", openrestyPeerConf, n)
	}
	if strings.Contains(string(conf), "sk:") {
		t.Errorf("%s spells a Redis key: build it with stock's builders", openrestyPeerConf)
	}
	call := openrestyDeductCall()
	for _, want := range []string{`6, "sk:{" .. product .. "}:stock", `, `"sk:{" .. product .. "}:u:" .. user, `,
		`, product, cfg.grace_ms, cfg.order_ttl_ms, "1", user, qty, cfg.limit, oid,`} {
		if !strings.Contains(call, want) {
			t.Errorf("the OpenResty call %s lacks %s", call, want)
		}
	}
	keys, args := redisBenchmarkCall()
	if keys[0] != stock.StockKey(rbProduct) || keys[3] != stock.BuyerKey(rbProduct, "user__rand_int__") ||
		!slices.Equal(args[:4], []string{rbProduct, "604800000", "604800000", "1"}) || len(keys) != 6 || len(args) != 13 {
		t.Errorf("redis-benchmark's call: %q %q", keys, args)
	}
}
