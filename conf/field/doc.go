// Package field carries configuration errors that name the offending field.
//
// Each section's validation (in conf) and each filter's (the filter
// registry decodes a filter's own params with Decode) reports problems with
// paths relative to its own section; the caller prefixes the section path and
// looks up the YAML line, so an operator reads "filters[2].rate (line 41):
// ...". It is a leaf package so that filters can use it without importing
// conf's whole document.
package field
