package catalog

import (
	"time"

	"flashgate/conf"
	"flashgate/conf/field"
	"flashgate/sale/room"
)

// Build validates c and returns the activity; base anchors relative times.
// Errors name fields relative to the entry.
func Build(c conf.ActivityConfig, base time.Time) (*Sale, field.Errors) {
	var errs field.Errors
	a := &Sale{ProductID: c.ProductID, Name: c.Name, Image: c.Image, Stock: c.Stock, Limit: c.Limit}
	if c.PayTimeout != nil {
		a.OwnPayTimeout, a.PayTimeoutMs = true, c.PayTimeout.Milliseconds()
		if *c.PayTimeout > 0 && a.PayTimeoutMs == 0 {
			a.PayTimeoutMs = 1 // below 1ms: refused by Validate as below 1s, not taken as "none"
		}
	}
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
	rm, rerrs := room.Build(c.Room, a.StartMs)
	errs = append(errs, rerrs...)
	a.Room = rm
	return a, errs
}
