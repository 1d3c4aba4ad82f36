package filters

import (
	"flashgate/conf/field"

	"flashgate/sale/api"
	"flashgate/sale/ptoken"
)

func init() { Register("purchase_token", newPurchaseToken) }

// purchaseToken checks the one-time token of a `do` call: minted by this
// fleet, for this user and product, not expired. Whether it was already
// used is decided atomically by the deduction script, which records its
// nonce; a request refused earlier never burns it.
type purchaseToken struct {
	minter *ptoken.Minter
}

func newPurchaseToken(spec Spec, env *Env) (Filter, field.Errors) {
	var cfg struct{}
	if errs := decodeParams(spec, &cfg); len(errs) > 0 {
		return nil, errs
	}
	if env == nil || env.Tokens == nil {
		return nil, field.Errors{{Msg: "needs sale.token_secret"}}
	}
	return &purchaseToken{minter: env.Tokens}, nil
}

func (f *purchaseToken) Handle(r *Request) Verdict {
	if r.Endpoint != api.EndpointDo {
		return Pass
	}
	return Verdict{Reject: r.CheckToken(f.minter)}
}
