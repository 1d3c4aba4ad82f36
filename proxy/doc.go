// Package proxy is the edge server: the fasthttp listener for shoppers, the
// router (sale page, sale API behind the filter chain, everything else to
// the origin pools), the admin listener, and the holder of the current
// configuration snapshot, which reloads swap atomically.
package proxy
