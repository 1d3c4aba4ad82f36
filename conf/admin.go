package conf

import (
	"fmt"
	"strings"

	"flashgate/conf/field"
)

// AdminConfig is the operator listener (metrics, health, reload).
type AdminConfig struct {
	// Addr may be given as "env:NAME" (a container's image sets it from its
	// environment); Parse replaces it with the value, so the rest of the
	// edge sees an address.
	Addr string `yaml:"addr"`
	// Token is required when Addr is not a loopback address. It may be given
	// as "env:NAME" to read it from the environment. Never logged.
	Token string `yaml:"token" secret:"true"`
	// Hosts are the names, besides localhost and IP addresses, that the
	// admin listener answers to in the Host header: a name Prometheus or a
	// reverse proxy uses. Any other name is refused, so a web page cannot
	// read the admin API through DNS rebinding (adminhosts.go).
	Hosts []string `yaml:"hosts"`
}

// ResolveAddr returns the admin address, reading it from the environment
// when written as "env:NAME". A parsed document holds the value already.
func (a AdminConfig) ResolveAddr() (string, error) { return field.ResolveEnv(a.Addr) }

// ResolveToken returns the admin token, reading it from the environment
// when written as "env:NAME".
func (a AdminConfig) ResolveToken() (string, error) { return field.ResolveEnv(a.Token) }

// validate checks the address and the rule that keeps the admin API closed:
// anywhere but loopback it needs a token. The errors say where a value came
// from, so that a container started without its variable says which one.
func (a AdminConfig) validate(errs *field.Errors) {
	addr, err := a.ResolveAddr()
	if err != nil {
		errs.Add("admin.addr", "%v", err)
		return
	}
	where := addr
	if name, fromEnv := strings.CutPrefix(a.Addr, "env:"); fromEnv {
		if addr == "" {
			errs.Add("admin.addr", "environment variable %s is empty; want host:port or :port", name)
			return
		}
		where = fmt.Sprintf("%s, from %s", addr, name)
	}
	checkAddr(errs, "admin.addr", addr)
	open := addr != "" && !isLoopback(addr)
	const why = "the admin API must never be open to the world"
	tok, err := a.ResolveToken()
	switch {
	case err != nil && open:
		errs.Add("admin.token", "%v; a token is required when admin.addr (%s) is not a loopback address: %s", err, where, why)
	case err != nil:
		errs.Add("admin.token", "%v", err)
	case tok == "" && open:
		if name, fromEnv := strings.CutPrefix(a.Token, "env:"); fromEnv {
			errs.Add("admin.token", "environment variable %s is empty; a token is required when admin.addr (%s) is not a loopback address: %s", name, where, why)
		} else {
			errs.Add("admin.token", "required when admin.addr (%s) is not a loopback address: %s", where, why)
		}
	case tok != "" && len(tok) < 16:
		errs.Add("admin.token", "must be at least 16 characters")
	}
}
