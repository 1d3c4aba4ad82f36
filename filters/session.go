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
// from a request body.
type sessionFilter struct {
	codec  *session.Codec
	reject *api.Rejection
}

func newSession(spec Spec, env *Env) (Filter, field.Errors) {
	var cfg struct{}
	if errs := decodeParams(spec, &cfg); len(errs) > 0 {
		return nil, errs
	}
	if env == nil || env.Sessions == nil {
		return nil, field.Errors{{Msg: "needs the auth section (auth.secrets)"}}
	}
	return &sessionFilter{codec: env.Sessions, reject: api.Unauthenticated}, nil
}

func (f *sessionFilter) Handle(r *Request) Verdict {
	if !r.Endpoint.NeedsUser() {
		return Pass
	}
	tok := session.FromRequest(r.Ctx)
	uid, err := f.codec.Verify(tok, r.NowNano/1e9, r.UserBuf())
	if err != nil {
		return Verdict{Reject: f.reject}
	}
	r.SetUser(uid)
	return Pass
}
