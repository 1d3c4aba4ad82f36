package conf

import (
	"strings"

	"flashgate/conf/field"
)

// validateHosts checks admin.hosts: plain host names or IP addresses, no
// port (the admin listener ignores the Host header's port: tunnels and port
// mappings change it) and no wildcard.
func (a *AdminConfig) validateHosts(errs *field.Errors) {
	for i, h := range a.Hosts {
		at := field.Index("admin.hosts", i)
		if strings.TrimSpace(h) == "" {
			errs.Add(at, "must not be empty")
			continue
		}
		if _, msg := normalizeHost(h); msg != "" {
			errs.Add(at, "%s", msg)
		}
	}
}

// AllowedHost reports whether host (the Host header without its port,
// lowercase) is one of admin.hosts.
func (a *AdminConfig) AllowedHost(host string) bool {
	for _, h := range a.Hosts {
		if n, _ := normalizeHost(h); n == host {
			return true
		}
	}
	return false
}
