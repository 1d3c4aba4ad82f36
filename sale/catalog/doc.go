// Package activity holds the sales ("activities") an edge knows about, in
// memory, so that every per-request question — does this product exist, has
// its sale started, is it sold out, what does its status look like — is
// answered without a network call.
//
// The Registry is copy-on-write: readers load one atomic pointer; writers
// (config reload, admin API, the background refresh from Redis) build a new
// map. Per-product runtime state (the sold-out flag, the last known
// remaining stock, the request rate for hotspot detection) lives in State,
// which is kept across replacements of the product's Sale. The
// BoughtCache remembers which shoppers reached a sale's per-user limit.
package catalog
