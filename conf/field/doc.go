// Package field carries configuration errors that name the offending field.
//
// Packages that own a slice of the configuration (filters, upstream, static)
// validate their own settings and report problems with paths relative to
// their own section; the conf package prefixes the section path and looks up
// the YAML line, so an operator reads "filters[2].rate (line 41): ...".
// It is a leaf package so every owner can use it without an import cycle.
package field
