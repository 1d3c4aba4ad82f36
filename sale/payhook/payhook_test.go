package payhook

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"flashgate/sale/api"
)

var secret = []byte(strings.Repeat("s", 32))

func TestVerify(t *testing.T) {
	v := New(secret, 5*time.Minute)
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"evt_1","type":"payment.succeeded","productId":"p1","orderId":"42"}`)
	ts := now.Unix()
	tsH := []byte(strconv.FormatInt(ts, 10))
	good := Sign(secret, ts, body)
	for _, tc := range []struct {
		name    string
		ts, sig string
		body    []byte
		now     time.Time
		want    *api.Rejection
	}{
		{"signed and fresh", string(tsH), good, body, now, nil},
		{"one of several signatures", string(tsH), "v1=" + strings.Repeat("0", 64) + ", " + good, body, now, nil},
		{"no signature", string(tsH), "", body, now, api.BadSignature},
		{"another secret", string(tsH), Sign([]byte(strings.Repeat("x", 32)), ts, body), body, now, api.BadSignature},
		{"body changed", string(tsH), good, append([]byte(nil), strings.Replace(string(body), "42", "43", 1)...), now, api.BadSignature},
		{"timestamp changed", strconv.FormatInt(ts+1, 10), good, body, now, api.BadSignature},
		{"not hex", string(tsH), "v1=" + strings.Repeat("zz", 32), body, now, api.BadSignature},
		{"another scheme", string(tsH), strings.Replace(good, "v1=", "v0=", 1), body, now, api.BadSignature},
		{"timestamp not a number", "soon", good, body, now, api.BadTimestamp},
		{"too old", string(tsH), good, body, now.Add(5*time.Minute + time.Second), api.OldTimestamp},
		{"in the future", string(tsH), good, body, now.Add(-5*time.Minute - time.Second), api.FutureTimestamp},
		{"at the tolerance", string(tsH), good, body, now.Add(5 * time.Minute), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := v.Verify([]byte(tc.ts), []byte(tc.sig), tc.body, tc.now); got != tc.want {
				t.Fatalf("Verify = %v, want %v", got, tc.want)
			}
		})
	}
	if v.ReplayTTL() != 10*time.Minute {
		t.Fatalf("replay ttl %v", v.ReplayTTL())
	}
}

func TestParseEvent(t *testing.T) {
	e, rej := ParseEvent([]byte(`{"id":"evt_1-A","type":"payment.succeeded","productId":"p1","orderId":"42"}`))
	if rej != nil || e.ID != "evt_1-A" || e.ProductID != "p1" || e.OrderID != 42 || !e.Pays() {
		t.Fatalf("parsed %+v %v", e, rej)
	}
	if e, rej := ParseEvent([]byte(`{"id":"e2","type":"payment.refunded"}`)); rej != nil || e.Pays() {
		t.Fatalf("other type: %+v %v", e, rej)
	}
	for _, bad := range []string{
		`not json`,
		`{"type":"payment.succeeded","productId":"p1","orderId":"42"}`,
		`{"id":"has space","type":"payment.succeeded","productId":"p1","orderId":"42"}`,
		`{"id":"` + strings.Repeat("a", 65) + `","type":"payment.succeeded","productId":"p1","orderId":"42"}`,
		`{"id":"e","type":"payment.succeeded","productId":"p{1}","orderId":"42"}`,
		`{"id":"e","type":"payment.succeeded","productId":"p1","orderId":"0"}`,
		`{"id":"e","type":"payment.succeeded","productId":"p1"}`,
		`{"id":"e","productId":"p1","orderId":"42"}`,
	} {
		if _, rej := ParseEvent([]byte(bad)); rej != api.BadWebhookEvent {
			t.Errorf("%s: %v, want BadWebhookEvent", bad, rej)
		}
	}
}

// FuzzVerify: no input makes Verify panic or accept a body it did not sign.
func FuzzVerify(f *testing.F) {
	v := New(secret, time.Hour)
	now := time.Unix(1_800_000_000, 0)
	f.Add([]byte("1800000000"), []byte(Sign(secret, 1_800_000_000, []byte("x"))), []byte("y"))
	f.Add([]byte(""), []byte("v1="), []byte(""))
	f.Fuzz(func(t *testing.T, ts, sig, body []byte) {
		if v.Verify(ts, sig, body, now) == nil {
			n, _ := strconv.ParseInt(string(ts), 10, 64)
			if !strings.Contains(string(sig), Sign(secret, n, body)[3:]) {
				t.Fatalf("accepted %q %q %q", ts, sig, body)
			}
		}
	})
}

func FuzzParseEvent(f *testing.F) {
	f.Add([]byte(`{"id":"e","type":"payment.succeeded","productId":"p1","orderId":"1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if e, rej := ParseEvent(b); rej == nil && !ValidID(e.ID) {
			t.Fatalf("accepted id %q", e.ID)
		}
	})
}
