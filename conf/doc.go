// Package conf loads the edge's YAML configuration: it parses strictly
// (unknown keys are errors), fills defaults, validates every field (errors
// name the field path and the line), and compiles the result into an
// immutable Snapshot that the proxy swaps atomically on reload.
//
// Compiling never starts anything: upstream health checks are activated and
// old state retired only after the new snapshot is in place, so a config
// that fails anywhere leaves the running edge untouched.
package conf
