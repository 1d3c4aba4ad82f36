package filters

import (
	"flashgate/conf/field"
	"flashgate/sale/activity"
	"flashgate/sale/api"
)

func init() { Register("sale_window", newSaleWindow) }

// saleWindow answers from edge memory whether the product exists and its
// sale is open, before anything costs more. For status calls it only
// resolves the product (the status answer itself says upcoming/ended).
type saleWindow struct {
	reg                        *activity.Registry
	unknown, notStarted, ended *api.Rejection
}

func newSaleWindow(spec Spec, env *Env) (Filter, field.Errors) {
	var cfg struct{}
	if errs := decodeParams(spec, &cfg); len(errs) > 0 {
		return nil, errs
	}
	if env == nil || env.Activities == nil {
		return nil, field.Errors{{Msg: "needs the sale (activities)"}}
	}
	return &saleWindow{
		reg:        env.Activities,
		unknown:    api.UnknownProduct,
		notStarted: api.NotStarted,
		ended:      api.Ended,
	}, nil
}

func (f *saleWindow) Handle(r *Request) Verdict {
	if r.Endpoint != api.EndpointStatus && !r.Endpoint.Buys() {
		return Pass
	}
	e, ok := f.reg.Get(r.ProductID)
	if !ok {
		return Verdict{Reject: f.unknown}
	}
	r.Activity = e
	if r.Endpoint == api.EndpointStatus {
		return Pass
	}
	if r.Endpoint == api.EndpointDo {
		e.CountAttempt()
	}
	switch e.PhaseAt(r.NowNano/1e6, false) {
	case activity.Upcoming:
		return Verdict{Reject: f.notStarted}
	case activity.Ended:
		return Verdict{Reject: f.ended}
	}
	return Pass
}
