package filters

// Zones holds limiter state that outlives a config reload (see zones
// implementation by the filters owner).
type Zones struct{}
