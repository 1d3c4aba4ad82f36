package filters

import (
	"flashgate/conf/field"
)

func init() { Register("sold_out", newSoldOut) }

// soldOut answers 410 from the local flag once a product's stock is gone,
// so a sold-out product never costs a Redis call. The flag is set by the
// deduction's answer on this edge and by the broadcast from other edges,
// and cleared on restock or release.
type soldOut struct{}

func newSoldOut(spec Spec, env *Env) (Filter, field.Errors) {
	var cfg struct{}
	if errs := decodeParams(spec, &cfg); len(errs) > 0 {
		return nil, errs
	}
	return soldOut{}, nil
}

// Handle decides only for a product sale_window found before it.
func (soldOut) Handle(r *Request) Verdict {
	if !r.Endpoint.Buys() || r.Sale.State == nil {
		return Pass
	}
	return Verdict{Reject: r.CheckInStock()}
}
