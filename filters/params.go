package filters

import "flashgate/conf/field"

// commonKeys are the keys of a filter's mapping that conf decodes into Spec;
// constructors skip them when decoding their own params strictly.
var commonKeys = []string{"type", "name", "enabled", "dry_run", "scope"}

// decodeParams decodes spec.Params into cfg (pre-filled with defaults),
// rejecting unknown keys with their path and line. Params may be nil.
func decodeParams(spec Spec, cfg any) field.Errors {
	return field.Decode(spec.Params, cfg, commonKeys...)
}

func checkStatus(errs *field.Errors, status int) {
	if status < 400 || status > 599 {
		errs.Add("status", "must be a 4xx or 5xx status, got %d", status)
	}
}

func checkIPv6Prefix(errs *field.Errors, bits int) {
	if bits < 16 || bits > 128 {
		errs.Add("ipv6_prefix", "must be between 16 and 128, got %d", bits)
	}
}

// zoneName is the configured zone, else the filter's name, else its type.
func zoneName(spec Spec, zone string) string {
	switch {
	case zone != "":
		return zone
	case spec.Name != "":
		return spec.Name
	}
	return spec.Type
}

// envZones is where a constructor keeps state; without an Env (a constructor
// called directly) the state is private to the filter.
func envZones(env *Env) *Zones {
	if env == nil || env.Zones == nil {
		return NewZones()
	}
	return env.Zones
}
