package catalog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"flashgate/conf/field"
	"flashgate/orders/order"
	"flashgate/sale/room"
)

// Sale is one sale: immutable once built; replace it to change it.
type Sale struct {
	ProductID  string
	Name       string
	PriceCents int64
	Image      string
	// Stock is the initial stock (plus restocks), for display and reconciliation.
	Stock   int64
	Limit   int
	StartMs int64
	EndMs   int64
	// Room is the sale's waiting room (nil: none): shoppers join its queue
	// and buy when admitted.
	Room *room.Room
	// OwnPayTimeout says the sale has its own time to pay, PayTimeoutMs
	// (0: no deadline); otherwise it takes orders.pay_timeout. A sale
	// stored before deadlines existed has neither, and takes the global.
	OwnPayTimeout bool  `json:",omitempty"`
	PayTimeoutMs  int64 `json:",omitempty"`
}

// PayTimeout is the sale's time to pay in ms (0: no deadline), given the
// global orders.pay_timeout.
func (a *Sale) PayTimeout(globalMs int64) int64 {
	if a.OwnPayTimeout {
		return a.PayTimeoutMs
	}
	return globalMs
}

// Phase is where a sale stands at an instant.
type Phase uint8

const (
	Upcoming Phase = iota
	Active
	SoldOut
	Ended
)

var phaseNames = [...]string{"upcoming", "active", "soldout", "ended"}

func (p Phase) String() string { return phaseNames[p] }

// PhaseAt is the phase at nowMs given the sold-out flag. An ended sale is
// "ended" even if it sold out, since nothing can change any more.
func (a *Sale) PhaseAt(nowMs int64, soldOut bool) Phase {
	switch {
	case nowMs >= a.EndMs:
		return Ended
	case nowMs < a.StartMs:
		return Upcoming
	case soldOut:
		return SoldOut
	}
	return Active
}

// Validate checks an activity; errors name the field as written in YAML and
// in the admin API.
func (a *Sale) Validate() field.Errors {
	var errs field.Errors
	if !order.ValidProductID(a.ProductID) {
		errs.Add("product_id", "%q must be 1-64 characters of letters, digits, '_' or '-', starting with a letter or digit", a.ProductID)
	}
	if strings.TrimSpace(a.Name) == "" || len(a.Name) > 200 {
		errs.Add("name", "must be 1-200 characters")
	}
	if a.PriceCents < 0 {
		errs.Add("price", "must not be negative")
	}
	if a.Stock < 0 || a.Stock > 1e9 {
		errs.Add("stock", "must be between 0 and 1000000000, got %d", a.Stock)
	}
	if a.Limit < 1 || a.Limit > 1000 {
		errs.Add("limit", "must be between 1 and 1000, got %d", a.Limit)
	}
	if a.EndMs <= a.StartMs {
		errs.Add("end", "must be after start")
	}
	if a.PayTimeoutMs < 0 {
		errs.Add("pay_timeout", "must not be negative (0 = no deadline), got %dms", a.PayTimeoutMs)
	} else if a.PayTimeoutMs > 0 && a.PayTimeoutMs < 1000 {
		errs.Add("pay_timeout", "must be 0 (no deadline) or at least 1s, got %dms", a.PayTimeoutMs)
	}
	if len(a.Image) > 500 || strings.ContainsAny(a.Image, "\"<>\\ \n") {
		errs.Add("image", "must be a plain URL or path of at most 500 characters")
	}
	return errs
}

// ParseTime reads an RFC 3339 time or a duration relative to base ("+30s",
// "-1m", "+0s"), returning unix milliseconds.
func ParseTime(s string, base time.Time) (int64, error) {
	if s == "" {
		return 0, errors.New("is required (RFC 3339 such as 2026-11-11T00:00:00+08:00, or relative to start such as +30s)")
	}
	if s[0] == '+' || s[0] == '-' {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("%q is not a relative time such as +30s or +1h", s)
		}
		return base.Add(d).UnixMilli(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return 0, fmt.Errorf("%q is not an RFC 3339 time such as 2026-11-11T00:00:00+08:00 (or +30s)", s)
	}
	return t.UnixMilli(), nil
}

// ParsePrice reads "99", "99.9" or "99.00" into cents. Money is never a float.
func ParsePrice(s string) (int64, error) {
	whole, frac, hasFrac := strings.Cut(strings.TrimSpace(s), ".")
	if whole == "" || len(whole) > 10 || (hasFrac && (len(frac) == 0 || len(frac) > 2)) {
		return 0, fmt.Errorf("%q is not a price such as 99.00", s)
	}
	w, err := strconv.ParseUint(whole, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a price such as 99.00", s)
	}
	var f uint64
	if hasFrac {
		if f, err = strconv.ParseUint(frac, 10, 64); err != nil {
			return 0, fmt.Errorf("%q is not a price such as 99.00", s)
		}
		if len(frac) == 1 {
			f *= 10
		}
	}
	return int64(w*100 + f), nil
}

// AppendPrice appends cents as "99.00".
func AppendPrice(dst []byte, cents int64) []byte {
	if cents < 0 {
		dst = append(dst, '-')
		cents = -cents
	}
	dst = strconv.AppendInt(dst, cents/100, 10)
	dst = append(dst, '.', byte('0'+cents%100/10), byte('0'+cents%10))
	return dst
}
