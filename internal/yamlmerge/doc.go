// Package yamlmerge overlays one decoded YAML document on another: how the
// test kits and bench derive an edge config from the shipped edge.yaml and a
// few overrides, the way an operator edits a copy of it.
package yamlmerge
