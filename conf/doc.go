// Package conf loads the edge's YAML configuration: it parses strictly
// (unknown keys are errors), fills defaults and validates every field
// (errors name the field path and the line). The result is plain data; the
// proxy compiles it into the snapshot it serves with.
package conf
