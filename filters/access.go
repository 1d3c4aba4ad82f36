package filters

import (
	"strings"

	"flashgate/conf/field"
	"flashgate/sale/api"
)

func init() { Register("access", newAccess) }

// access is nginx's allow/deny: an ordered list of rules, the first rule that
// matches the client address decides, and an address no rule matches is
// allowed. So a whitelist ends with "deny all":
//
//	rules: ["allow 10.0.0.0/8", "allow 2001:db8::/32", "deny all"]
//
// and a blacklist is just its "deny" lines. Each rule is "allow" or "deny"
// followed by an address, a CIDR or "all". One form only, on purpose: two
// lists plus an order between them is how ACLs end up meaning something
// nobody intended.
//
// Rules are flattened into disjoint address ranges at build time, so a
// lookup is one binary search whatever the number of rules. IPv4 rules match
// IPv4 clients and their IPv4-mapped IPv6 form. A request without a client
// address (not over TCP) matches only "all" rules.
type access struct {
	set    rangeSet
	noAddr uint8 // decision for the invalid address
	deny   Verdict
}

type accessConfig struct {
	Rules []string `yaml:"rules"`
}

const (
	accessDeny  = 0
	accessAllow = 1
)

func newAccess(spec Spec, env *Env) (Filter, field.Errors) {
	var cfg accessConfig
	errs := decodeParams(spec, &cfg)
	if len(errs) > 0 {
		return nil, errs
	}
	if len(cfg.Rules) == 0 {
		errs.Add("rules", `at least one rule is required, e.g. "deny 192.0.2.0/24"`)
	}
	rules := make([]prefixRule, 0, len(cfg.Rules))
	noAddr, noAddrSet := uint8(accessAllow), false
	for i, text := range cfg.Rules {
		path := field.Index("rules", i)
		f := strings.Fields(text)
		if len(f) != 2 {
			errs.Add(path, `want "allow <address|CIDR|all>" or "deny <address|CIDR|all>", got %q`, text)
			continue
		}
		var val uint8
		switch f[0] {
		case "allow":
			val = accessAllow
		case "deny":
			val = accessDeny
		default:
			errs.Add(path, `must start with "allow" or "deny", got %q`, f[0])
			continue
		}
		if f[1] == "all" {
			rules = append(rules, ruleAll(val))
			if !noAddrSet {
				noAddr, noAddrSet = val, true
			}
			continue
		}
		p, err := parseCIDR(f[1])
		if err != nil {
			errs.Add(path, "%v", err)
			continue
		}
		rules = append(rules, rulePrefix(p, val))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &access{
		set:    buildRangeSet(rules, accessAllow),
		noAddr: noAddr,
		deny:   Verdict{Reject: api.Forbidden},
	}, nil
}

func (a *access) Handle(r *Request) Verdict {
	v := a.noAddr
	if r.ClientIP.IsValid() {
		v = a.set.lookup(addrU128(r.ClientIP))
	}
	if v == accessAllow {
		return Pass
	}
	return a.deny
}
