package filters

import (
	"flashgate/conf/field"
	"flashgate/sale/api"
	"flashgate/sale/catalog"
)

func init() { Register("sale_window", newSaleWindow) }

// saleWindow answers from edge memory whether the product exists and its
// sale is open, before anything costs more. For status calls it only
// resolves the product (the status answer itself says upcoming/ended).
type saleWindow struct {
	reg *catalog.Registry
}

func newSaleWindow(spec Spec, env *Env) (Filter, field.Errors) {
	var cfg struct{}
	if errs := decodeParams(spec, &cfg); len(errs) > 0 {
		return nil, errs
	}
	if env == nil || env.Sales == nil {
		return nil, field.Errors{{Msg: "needs the sale (activities)"}}
	}
	return &saleWindow{reg: env.Sales}, nil
}

func (f *saleWindow) Handle(r *Request) Verdict {
	if r.Endpoint != api.EndpointStatus && !r.Endpoint.Buys() {
		return Pass
	}
	if rej := r.CheckProduct(f.reg); rej != nil || r.Endpoint == api.EndpointStatus {
		return Verdict{Reject: rej}
	}
	if r.Endpoint == api.EndpointDo {
		r.Sale.CountAttempt()
	}
	return Verdict{Reject: r.CheckSaleOpen()}
}
