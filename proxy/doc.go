// Package proxy is the edge server: the fasthttp listener for shoppers, the
// router (sale page, sale API behind the filter chain, everything else to
// the origin pools), the admin listener, and the holder of the current
// configuration snapshot, which reloads swap atomically.
//
// Compile turns a loaded conf.Document into that Snapshot. It never starts
// anything: upstream health checks are activated and old state retired only
// after the new snapshot is in place, so a config that fails anywhere
// leaves the running edge untouched.
package proxy
