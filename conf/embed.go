package conf

import _ "embed"

// DefaultYAML is conf/edge.yaml as built into the binary, so `proxy` runs
// with no file at all (the zero-setup demo).
//
//go:embed edge.yaml
var DefaultYAML []byte
