package conf

import (
	"encoding/json"
	"fmt"
	"time"

	"flashgate/conf/field"
)

// ActivityConfig is one entry of `activities:` (a sale), and the body of
// the admin API's create/update call. catalog.Build turns it into the
// sale's Activity and checks it.
type ActivityConfig struct {
	ProductID string `yaml:"product_id" json:"productId"`
	Name      string `yaml:"name" json:"name"`
	// Price is a decimal string such as "99.00" (never a float).
	Price string `yaml:"price" json:"price"`
	Image string `yaml:"image" json:"image"`
	Stock int64  `yaml:"stock" json:"stock"`
	Limit int    `yaml:"limit" json:"limit"`
	// Start and End are RFC 3339 times or durations relative to process
	// start ("+30s"), which keeps demo configs valid whenever they run.
	Start string `yaml:"start" json:"start"`
	End   string `yaml:"end" json:"end"`
	// Room, when enabled, puts shoppers in a queue before they may
	// buy (sale/room).
	Room RoomConfig `yaml:"waiting_room" json:"waiting_room"`
	// PayTimeout is this sale's time to pay (orders.pay_timeout when
	// absent; 0 = no deadline for this sale). The admin API takes it as
	// "payTimeout": "15m".
	PayTimeout *time.Duration `yaml:"pay_timeout" json:"-"`
}

// activityPlain is ActivityConfig without its JSON methods.
type activityPlain ActivityConfig

// MarshalJSON writes payTimeout as a duration string ("15m"), absent when
// the sale takes the global one.
func (a ActivityConfig) MarshalJSON() ([]byte, error) {
	j := struct {
		activityPlain
		PayTimeout *string `json:"payTimeout,omitempty"`
	}{activityPlain: activityPlain(a)}
	if a.PayTimeout != nil {
		s := a.PayTimeout.String()
		j.PayTimeout = &s
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads payTimeout as a duration string; an error names the
// field.
func (a *ActivityConfig) UnmarshalJSON(b []byte) error {
	var j struct {
		activityPlain
		PayTimeout *string `json:"payTimeout"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*a = ActivityConfig(j.activityPlain)
	if j.PayTimeout != nil {
		d, err := time.ParseDuration(*j.PayTimeout)
		if err != nil {
			return fmt.Errorf("payTimeout: %q is not a duration such as 15m (0 = no deadline)", *j.PayTimeout)
		}
		a.PayTimeout = &d
	}
	return nil
}

// validateActivities checks what only the list as a whole can tell; each
// entry is checked when the sale builds it (catalog.Build), since its
// times are relative to the edge's start.
func validateActivities(errs *field.Errors, list []ActivityConfig, orderTTL time.Duration) {
	seen := map[string]int{}
	for i, a := range list {
		if a.PayTimeout != nil {
			checkPayTimeout(errs, field.Index("activities", i)+".pay_timeout", *a.PayTimeout, orderTTL)
		}
		if j, dup := seen[a.ProductID]; dup {
			errs.Add(field.Index("activities", i)+".product_id", "%q is already declared by activities[%d]", a.ProductID, j)
		}
		seen[a.ProductID] = i
	}
}

// RoomConfig is an activity's `waiting_room:`: shoppers join a queue
// and are let in to buy at a set rate (package sale/room). Zero values
// take the defaults of room.Build.
type RoomConfig struct {
	Enabled bool `yaml:"enabled"`
	// PrequeueOpens is how long before the sale's start the queue opens;
	// who joins before the start is placed by the lottery at the start.
	PrequeueOpens time.Duration `yaml:"prequeue_opens"`
	// AdmitPerMinute is how many shoppers are let in per minute.
	AdmitPerMinute int `yaml:"admit_per_minute"`
	// MaxActive caps the shoppers admitted and not finished (0: no cap).
	MaxActive int `yaml:"max_active"`
	// Session is how long an admitted shopper may buy.
	Session time.Duration `yaml:"session"`
	// Order is lottery_then_fifo (default) or fifo.
	Order     string        `yaml:"order"`
	Challenge RoomChallenge `yaml:"challenge"`
}

// RoomChallenge is the proof of work asked at joining.
type RoomChallenge struct {
	// Difficulty is the leading zero bits of SHA-256 (0: no challenge).
	Difficulty int `yaml:"difficulty" json:"difficulty"`
}

// roomJSON is the admin API's form: durations as strings ("10m").
type roomJSON struct {
	Enabled        bool          `json:"enabled"`
	PrequeueOpens  string        `json:"prequeue_opens,omitempty"`
	AdmitPerMinute int           `json:"admit_per_minute"`
	MaxActive      int           `json:"max_active"`
	Session        string        `json:"session,omitempty"`
	Order          string        `json:"order,omitempty"`
	Challenge      RoomChallenge `json:"challenge"`
}

// MarshalJSON writes the durations as Go duration strings.
func (w RoomConfig) MarshalJSON() ([]byte, error) {
	j := roomJSON{Enabled: w.Enabled, AdmitPerMinute: w.AdmitPerMinute, MaxActive: w.MaxActive,
		Order: w.Order, Challenge: w.Challenge}
	if w.PrequeueOpens != 0 {
		j.PrequeueOpens = w.PrequeueOpens.String()
	}
	if w.Session != 0 {
		j.Session = w.Session.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads durations as strings such as "10m"; an error names
// the field.
func (w *RoomConfig) UnmarshalJSON(b []byte) error {
	var j roomJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*w = RoomConfig{Enabled: j.Enabled, AdmitPerMinute: j.AdmitPerMinute, MaxActive: j.MaxActive,
		Order: j.Order, Challenge: j.Challenge}
	var err error
	if j.PrequeueOpens != "" {
		if w.PrequeueOpens, err = time.ParseDuration(j.PrequeueOpens); err != nil {
			return fmt.Errorf("waiting_room.prequeue_opens: %q is not a duration such as 10m", j.PrequeueOpens)
		}
	}
	if j.Session != "" {
		if w.Session, err = time.ParseDuration(j.Session); err != nil {
			return fmt.Errorf("waiting_room.session: %q is not a duration such as 5m", j.Session)
		}
	}
	return nil
}
