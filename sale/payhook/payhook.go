package payhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"

	"flashgate/orders/order"
	"flashgate/sale/api"
)

// The headers of a webhook call.
const (
	HeaderTimestamp = "Flashgate-Timestamp"
	HeaderSignature = "Flashgate-Signature"
)

// TypePaymentSucceeded is the one event type that pays an order; others
// are acknowledged and ignored, so a provider sending more kinds does not
// retry them forever.
const TypePaymentSucceeded = "payment.succeeded"

// MaxIDLen bounds an event id: [A-Za-z0-9_-]{1,64}, so that it goes into
// a Redis key unescaped.
const MaxIDLen = 64

// Verifier checks calls signed with one secret.
type Verifier struct {
	secret    []byte
	tolerance time.Duration
}

// New returns a verifier; secret must not be empty.
func New(secret []byte, tolerance time.Duration) *Verifier {
	return &Verifier{secret: bytes.Clone(secret), tolerance: tolerance}
}

// ReplayTTL is how long an event id must be remembered: a call older than
// the tolerance fails the timestamp, so twice it covers a clock ahead too.
func (v *Verifier) ReplayTTL() time.Duration { return 2 * v.tolerance }

// Sign returns the Flashgate-Signature value of body at ts (unix seconds):
// what a payment provider computes, and the tests.
func Sign(secret []byte, ts int64, body []byte) string {
	return "v1=" + hex.EncodeToString(mac(secret, strconv.AppendInt(nil, ts, 10), body))
}

func mac(secret, ts, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(ts)
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks the signature header over the timestamp header and the raw
// body, then the timestamp against now: nil when the call is authentic
// and fresh. A missing or wrong signature is 401; a timestamp that is not
// unix seconds, too old or in the future is 400 and says which. The
// signature header may carry several comma-separated v1= values (a secret
// being rotated at the provider); one must match.
func (v *Verifier) Verify(tsHeader, sigHeader, body []byte, now time.Time) *api.Rejection {
	if len(sigHeader) == 0 {
		return api.BadSignature
	}
	ts, err := strconv.ParseInt(string(tsHeader), 10, 64)
	if err != nil || ts <= 0 {
		return api.BadTimestamp
	}
	want := mac(v.secret, tsHeader, body)
	ok := false
	for _, part := range bytes.Split(sigHeader, []byte{','}) {
		part = bytes.TrimSpace(part)
		hexSig, found := bytes.CutPrefix(part, []byte("v1="))
		if !found || len(hexSig) != 2*sha256.Size {
			continue
		}
		got := make([]byte, sha256.Size)
		if _, err := hex.Decode(got, hexSig); err != nil {
			continue
		}
		// Every candidate is compared, whatever an earlier one gave.
		if hmac.Equal(got, want) {
			ok = true
		}
	}
	if !ok {
		return api.BadSignature
	}
	skew := now.Sub(time.Unix(ts, 0))
	switch {
	case skew > v.tolerance:
		return api.OldTimestamp
	case skew < -v.tolerance:
		return api.FutureTimestamp
	}
	return nil
}

// Event is the body of a webhook call.
type Event struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	ProductID string `json:"productId"`
	OrderID   int64  `json:"orderId,string"`
}

// Pays reports whether the event pays its order.
func (e *Event) Pays() bool { return e.Type == TypePaymentSucceeded }

// ParseEvent reads a verified body; nil rejection when it is well formed.
func ParseEvent(body []byte) (Event, *api.Rejection) {
	var e Event
	if err := json.Unmarshal(body, &e); err != nil || !ValidID(e.ID) || e.Type == "" {
		return Event{}, api.BadWebhookEvent
	}
	if e.Pays() && (!order.ValidProductID(e.ProductID) || e.OrderID <= 0) {
		return Event{}, api.BadWebhookEvent
	}
	return e, nil
}

// ValidID reports whether id is an event id: [A-Za-z0-9_-]{1,64}.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
