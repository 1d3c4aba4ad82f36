package activity

import (
	"time"

	"flashgate/conf/field"
)

// Config is one entry of `activities:` in the YAML, and the body of the
// admin API's create/update call.
type Config struct {
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
}

// Build validates c and returns the activity; base anchors relative times.
// Errors name fields relative to the entry.
func (c Config) Build(base time.Time) (*Activity, field.Errors) {
	var errs field.Errors
	a := &Activity{ProductID: c.ProductID, Name: c.Name, Image: c.Image, Stock: c.Stock, Limit: c.Limit}
	if c.Limit == 0 {
		a.Limit = 1
	}
	var err error
	if a.PriceCents, err = ParsePrice(c.Price); err != nil {
		errs.Add("price", "%v", err)
	}
	if a.StartMs, err = ParseTime(c.Start, base); err != nil {
		errs.Add("start", "%v", err)
	}
	if a.EndMs, err = ParseTime(c.End, base); err != nil {
		errs.Add("end", "%v", err)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	errs = a.Validate()
	return a, errs
}
