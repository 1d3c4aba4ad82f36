// Command bench is flashgate's load tool: open-loop (or closed-loop) load
// from scenario files, latency percentiles from the intended send time,
// reconciliation after every run, and the peer comparison.
//
//	go run ./bench run -s normal            # or burst, oversell, fault, failover
//	go run ./bench compare                  # flashgate vs nginx, OpenResty, fasthttp, redis-benchmark
//	go run ./bench list
//
// See bench/README.md.
package main
