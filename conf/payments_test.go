package conf

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestPayTimeout: the global and per-sale pay timeouts are read, a sale's
// 0 means no deadline for it, and a negative, sub-second or too long one
// is refused naming its field.
func TestPayTimeout(t *testing.T) {
	const sale = "activities:\n  - {product_id: a, name: A, price: \"1.00\", stock: 1, start: \"+0s\", end: \"+1h\"%s}\n"
	doc, err := Parse([]byte("orders: {pay_timeout: 15m}\n"+strings.Replace(sale, "%s", ", pay_timeout: 0s", 1)), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if doc.Config.Orders.PayTimeout != 15*time.Minute {
		t.Fatalf("orders.pay_timeout = %v", doc.Config.Orders.PayTimeout)
	}
	if p := doc.Config.Activities[0].PayTimeout; p == nil || *p != 0 {
		t.Fatalf("activity pay_timeout = %v, want an explicit 0", p)
	}
	doc, err = Parse([]byte(strings.Replace(sale, "%s", "", 1)), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if doc.Config.Orders.PayTimeout != 0 || doc.Config.Activities[0].PayTimeout != nil {
		t.Fatalf("default: global %v, activity %v; want off and absent", doc.Config.Orders.PayTimeout, doc.Config.Activities[0].PayTimeout)
	}
	for _, tc := range []struct{ name, yaml, field string }{
		{"negative global", "orders: {pay_timeout: -1s}\n", "orders.pay_timeout"},
		{"sub-second global", "orders: {pay_timeout: 500ms}\n", "orders.pay_timeout"},
		{"global beyond order_ttl", "orders: {pay_timeout: 2h}\nsale: {order_ttl: 1h}\n", "orders.pay_timeout"},
		{"negative activity", strings.Replace(sale, "%s", ", pay_timeout: -5m", 1), "activities[0].pay_timeout"},
		{"sub-second activity", strings.Replace(sale, "%s", ", pay_timeout: 10ms", 1), "activities[0].pay_timeout"},
		{"short webhook tolerance", "payments: {webhook_tolerance: 10ms}\n", "payments.webhook_tolerance"},
		{"short webhook secret", "payments: {webhook_secret: too-short}\n", "payments.webhook_secret"},
		{"webhook secret from an unset variable", "payments: {webhook_secret: env:FLASHGATE_TEST_UNSET_WEBHOOK}\n", "payments.webhook_secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "t.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %v, want one naming %s", err, tc.field)
			}
		})
	}
}

// TestPayments: the webhook is off by default, its tolerance is 5m, and
// its secret may come from the environment.
func TestPayments(t *testing.T) {
	doc, err := Parse([]byte("node_id: 0\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := doc.Config.Payments
	if b, err := p.WebhookSecretBytes(); err != nil || b != nil || p.WebhookTolerance != 5*time.Minute {
		t.Fatalf("defaults: secret %q %v, tolerance %v", b, err, p.WebhookTolerance)
	}
	t.Setenv("FLASHGATE_TEST_WEBHOOK", strings.Repeat("w", 40))
	doc, err = Parse([]byte("payments: {webhook_secret: env:FLASHGATE_TEST_WEBHOOK}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := doc.Config.Payments.WebhookSecretBytes(); string(b) != strings.Repeat("w", 40) {
		t.Fatalf("secret %q", b)
	}
}

// TestActivityPayTimeoutJSON: the admin API's payTimeout is a duration
// string, absent when the sale takes the global one, and a bad one names
// the field.
func TestActivityPayTimeoutJSON(t *testing.T) {
	var a ActivityConfig
	if err := json.Unmarshal([]byte(`{"productId":"x","name":"X","payTimeout":"90s"}`), &a); err != nil {
		t.Fatal(err)
	}
	if a.ProductID != "x" || a.PayTimeout == nil || *a.PayTimeout != 90*time.Second {
		t.Fatalf("decoded %+v", a)
	}
	b, err := json.Marshal(a)
	if err != nil || !strings.Contains(string(b), `"payTimeout":"1m30s"`) || !strings.Contains(string(b), `"productId":"x"`) {
		t.Fatalf("encoded %s %v", b, err)
	}
	a = ActivityConfig{ProductID: "y"}
	if b, _ := json.Marshal(a); strings.Contains(string(b), "payTimeout") {
		t.Fatalf("absent pay timeout written: %s", b)
	}
	if err := json.Unmarshal([]byte(`{"payTimeout":"soon"}`), &a); err == nil || !strings.Contains(err.Error(), "payTimeout") {
		t.Fatalf("bad duration: %v", err)
	}
}
