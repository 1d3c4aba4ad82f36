package filters

import (
	"flashgate/conf/field"
	"flashgate/sale/api"
	"flashgate/sale/session"
)

func init() { Register("session", newSession) }

// sessionFilter verifies the signed session (JWT HS256 from the `session`
// cookie or a Bearer header) at the edge, with no Redis call, for the
// endpoints that act for a shopper. The user id comes only from here, never
// from a request body: a call that fails the check has none, and the
// signed-in rule refuses it.
type sessionFilter struct {
	codec *session.Codec
}

func newSession(spec Spec, env *Env) (Filter, field.Errors) {
	var cfg struct{}
	if errs := decodeParams(spec, &cfg); len(errs) > 0 {
		return nil, errs
	}
	if env == nil || env.Sessions == nil {
		return nil, field.Errors{{Msg: "needs the auth section (auth.secrets)"}}
	}
	return &sessionFilter{codec: env.Sessions}, nil
}

func (f *sessionFilter) Handle(r *Request) Verdict {
	if r.Endpoint == api.EndpointStatus {
		// Public, but a signed-in shopper's answer carries a purchase token
		// once the sale is open (sale.Service.status): a valid session is
		// read, a missing or bad one refuses nothing.
		if uid, err := f.codec.Verify(session.FromRequest(r.Ctx), r.NowNano/1e9, r.UserBuf()); err == nil {
			r.SetUser(uid)
		}
		return Pass
	}
	if !r.Endpoint.NeedsUser() {
		return Pass
	}
	uid, err := f.codec.Verify(session.FromRequest(r.Ctx), r.NowNano/1e9, r.UserBuf())
	if err != nil {
		r.UserID = nil
	} else {
		r.SetUser(uid)
	}
	return Verdict{Reject: r.CheckSignedIn()}
}
