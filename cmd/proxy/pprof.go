package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"
)

// startPprof serves the Go profiler on addr for profiling the edge under
// load (bench run -pprof, bench compare -pprof). The profiler has no
// authentication, so only a loopback address is accepted; it is off unless
// the flag is given. It uses its own mux: nothing else of the edge is
// reachable through it, and nothing registers on http.DefaultServeMux.
func startPprof(addr string, blockRate int, log *slog.Logger) (net.Addr, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("-pprof %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("-pprof %q: the profiler has no authentication; give a loopback address such as 127.0.0.1:6060", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-pprof: %v", err)
	}
	if blockRate > 0 {
		runtime.SetBlockProfileRate(blockRate)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil {
			log.Error("pprof listener failed", "err", err)
		}
	}()
	log.Warn("pprof listener started (profiling only: never expose it)", "addr", ln.Addr().String())
	return ln.Addr(), nil
}
