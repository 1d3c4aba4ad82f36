package proxy

import (
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"flashgate/conf"
	"flashgate/conf/field"
	"flashgate/filters"
	"flashgate/orders/stock"
	"flashgate/proxy/routeroom"
	"flashgate/proxy/tlsterm"
	"flashgate/sale"
	"flashgate/sale/catalog"
	"flashgate/sale/payhook"
	"flashgate/sale/ptoken"
	"flashgate/sale/room"
	"flashgate/sale/session"
	"flashgate/static"
	"flashgate/upstream"
)

// Env is the process-lifetime state a snapshot is compiled against: it is
// what survives a reload (limiter zones, filter counters, upstream health).
type Env struct {
	Zones     *filters.Zones
	Upstreams *upstream.Manager
	Now       func() int64 // unix nanoseconds; injectable for tests

	// The sale's process-lifetime state.
	Sales  *catalog.Registry
	Bought *catalog.BoughtCache
	// Start anchors relative activity times ("+30s") so that a reload does
	// not move a running demo sale.
	Start time.Time
	// Fallback secrets, random per process, for configs without secrets
	// (demo); kept here so that a reload does not sign everyone out.
	FallbackSessionSecret, FallbackTokenSecret []byte

	// Stock is the Redis store (wire.go opens it), for the filters with
	// policy redis; CheckOnly compiles without it, to check a document
	// only (proxy -t, and New before it connects): never serve such a
	// snapshot.
	Stock     *stock.Store
	CheckOnly bool
	// Rooms keeps the route rooms' live state (nil: check only); Log is
	// the edge's logger for what they log.
	Rooms *routeroom.Registry
	Log   *slog.Logger
}

// Snapshot is a compiled, immutable configuration. The proxy reads it
// through an atomic pointer; nothing in it is modified after Compile.
type Snapshot struct {
	Doc      *conf.Document
	Version  uint64
	LoadedAt time.Time

	RealIP *filters.RealIP
	// APIChain runs for the sale API: every enabled filter, in file order.
	APIChain *filters.Chain
	// EdgeChain runs for every other request: the filters with scope "all".
	EdgeChain *filters.Chain
	Static    *static.Handler
	Upstreams *upstream.Set
	// Rooms are the waiting rooms of the routes that have one, by route.
	Rooms map[*upstream.Route]*routeroom.Room

	// Sale holds the reloadable sale settings (sessions, tokens, catalog).
	Sale *sale.Settings

	// TLS is the certificate set of listen.tls (nil: plain HTTP), loaded
	// here so that `proxy -t`, a start and a reload check the files alike;
	// HSTS is the Strict-Transport-Security value (nil: none).
	TLS  *tlsterm.Certs
	HSTS []byte

	AdminToken string
	// Payhook checks the payment provider's webhook calls (nil: the
	// webhook is off, payments.webhook_secret is empty).
	Payhook *payhook.Verifier
	// AccessSampleEvery logs one request in N (0 = none).
	AccessSampleEvery uint64
}

// Compile builds a snapshot. It starts nothing and changes no live state
// except creating limiter zones that did not exist yet, which is harmless if
// the snapshot is then discarded.
func Compile(doc *conf.Document, env *Env, version uint64) (*Snapshot, error) {
	cfg := doc.Config
	var errs field.Errors
	s := &Snapshot{Doc: doc, Version: version, LoadedAt: time.Now()}

	rip, ferrs := filters.NewRealIP(cfg.RealIP.Header, cfg.RealIP.TrustedProxies)
	errs.Nest("real_ip", ferrs)
	s.RealIP = rip

	specs := make([]filters.Spec, len(cfg.Filters))
	for i, f := range cfg.Filters {
		specs[i] = filters.Spec{Type: f.Type, Name: f.Name, Enabled: f.Enabled == nil || *f.Enabled, DryRun: f.DryRun, Params: f.Node}
	}
	// One Build for the whole list, so names and zones are checked across
	// filters; the edge chain is the subset with scope "all", in file order.
	saleSettings, serrs := compileSale(cfg, env)
	errs = append(errs, serrs...)
	s.Sale = saleSettings
	fenv := &filters.Env{Now: env.Now, Zones: env.Zones, Sales: env.Sales, Bought: env.Bought, Stock: env.Stock, CheckOnly: env.CheckOnly}
	if saleSettings != nil {
		fenv.Sessions, fenv.Tokens = saleSettings.Sessions, saleSettings.Tokens
	}
	chain, ferrs := filters.Build(specs, fenv)
	errs.Nest("filters", ferrs)
	var apiEntries, edgeEntries []filters.Entry
	if chain != nil {
		scopes := make(map[string]string, len(cfg.Filters))
		for _, f := range cfg.Filters {
			scopes[f.Name] = f.Scope
		}
		for _, e := range chain.Entries() {
			apiEntries = append(apiEntries, e)
			if scopes[e.Name] == "all" {
				edgeEntries = append(edgeEntries, e)
			}
		}
	}
	s.APIChain = filters.NewChain(apiEntries)
	s.EdgeChain = filters.NewChain(edgeEntries)

	st, err := static.New(cfg.Static)
	if err != nil {
		errs.Add("static", "%v", err)
	}
	s.Static = st

	ups, err := env.Upstreams.Build(cfg.Upstreams)
	if err != nil {
		errs.Add("upstreams", "%v", err)
	}
	s.Upstreams = ups
	rooms, rerrs := compileRooms(cfg, env, ups)
	errs = append(errs, rerrs...)
	s.Rooms = rooms

	if t := &cfg.Listen.TLS; t.Enabled() {
		certs, terrs := tlsterm.Load(t, time.Now())
		errs.Nest("listen.tls", terrs)
		s.TLS = certs
		if sec := t.HSTS.Seconds(); sec > 0 {
			s.HSTS = []byte("max-age=" + strconv.FormatInt(sec, 10))
		}
	}

	tok, err := cfg.Admin.ResolveToken()
	if err != nil {
		errs.Add("admin.token", "%v", err)
	}
	s.AdminToken = tok
	if sec, err := cfg.Payments.WebhookSecretBytes(); err != nil {
		errs.Add("payments.webhook_secret", "%v", err)
	} else if sec != nil {
		s.Payhook = payhook.New(sec, cfg.Payments.WebhookTolerance)
	}
	if cfg.Log.AccessSample > 0 {
		s.AccessSampleEvery = uint64(1/cfg.Log.AccessSample + 0.5)
	}

	for i := range errs {
		if errs[i].Line == 0 {
			errs[i].Line = field.Line(doc.Root, errs[i].Path)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", doc.Source, errs)
	}
	return s, nil
}

// compileSale builds the sale's settings: session codec, token minter and
// the declared activities.
func compileSale(cfg *conf.Config, env *Env) (*sale.Settings, field.Errors) {
	var errs field.Errors
	st := &sale.Settings{
		DemoLogin:    cfg.Auth.DemoLogin,
		CookieSecure: cfg.Auth.CookieSecure,
		SessionTTL:   cfg.Auth.SessionTTL,
		TokenTTL:     cfg.Sale.TokenTTL,
		MaxBody:      cfg.Sale.MaxBody,
		Hotspot:      cfg.Sale.HotspotThreshold,
		PayTimeoutMs: cfg.Orders.PayTimeout.Milliseconds(),
	}
	// An edge that terminates TLS serves nothing over plain HTTP: its
	// session cookie is always Secure.
	st.CookieSecure = st.CookieSecure || cfg.Listen.TLS.Enabled()
	secrets, random, err := cfg.Auth.SessionSecrets()
	if err != nil {
		errs.Add("auth.secrets", "%v", err)
	} else {
		if random && env.FallbackSessionSecret != nil {
			secrets = [][]byte{env.FallbackSessionSecret}
		}
		if st.Sessions, err = session.NewCodec(secrets, cfg.Auth.SessionTTL); err != nil {
			errs.Add("auth.secrets", "%v", err)
		}
	}
	tsec, random, err := cfg.Sale.TokenSecretBytes()
	if err != nil {
		errs.Add("sale.token_secret", "%v", err)
	} else {
		if random && env.FallbackTokenSecret != nil {
			tsec = env.FallbackTokenSecret
		}
		if st.Tokens, err = ptoken.New(tsec); err != nil {
			errs.Add("sale.token_secret", "%v", err)
		}
		// The waiting rooms' tickets and challenges are signed under keys
		// derived from the same secret, each for its one use.
		if st.Tickets, err = room.NewTickets(room.DeriveSecret(tsec, "ticket")); err != nil {
			errs.Add("sale.token_secret", "%v", err)
		}
		st.Challenges = room.NewChallenger(tsec)
	}
	start := env.Start
	if start.IsZero() {
		start = time.Now()
	}
	for i, ac := range cfg.Activities {
		a, aerrs := catalog.Build(ac, start)
		errs.Nest(field.Index("activities", i), aerrs)
		if len(aerrs) == 0 {
			st.Catalog = append(st.Catalog, a)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return st, nil
}
