// Command pprofproxy is cmd/proxy with a net/http/pprof listener, for
// profiling the edge under the loads of bench/compare-nginx.sh:
//
//	GOMAXPROCS=1 go run ./bench/pprofproxy -c edge.yaml -pprof 127.0.0.1:6060 &
//	go tool pprof -top 'http://127.0.0.1:6060/debug/pprof/profile?seconds=10'
//
// It wires only what serving needs (config, server, shopper and admin
// listeners, SIGTERM); reloads and the rest of main's behaviour are left to
// cmd/proxy. `bench run -pprof` runs it as the edge. It is a
// bench tool: never deploy it, the pprof listener has no authentication.
package main

import (
	"context"
	"flag"
	"log"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"flashgate/conf"
	"flashgate/proxy"
)

func main() {
	cfgPath := flag.String("c", "conf/edge.yaml", "config file")
	pprofAddr := flag.String("pprof", "127.0.0.1:6060", "pprof listen address (loopback only)")
	blockRate := flag.Int("block-rate", 0, "runtime.SetBlockProfileRate (ns; 0: off): where goroutines wait, in /debug/pprof/block")
	flag.Parse()
	if *blockRate > 0 {
		runtime.SetBlockProfileRate(*blockRate)
	}

	doc, err := conf.LoadFile(*cfgPath)
	if err != nil {
		log.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := proxy.New(doc, proxy.Options{ConfigPath: *cfgPath, Logger: logger, Version: "pprof"})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", doc.Config.Listen.Addr)
	if err != nil {
		log.Fatal(err)
	}
	// The admin listener too, as cmd/proxy opens it: bench reconciles and
	// reads /metrics through it.
	var adminLn net.Listener
	if a := doc.Config.Admin.Addr; a != "" {
		if adminLn, err = net.Listen("tcp", a); err != nil {
			log.Fatal(err)
		}
	}
	go func() { log.Fatal(http.ListenAndServe(*pprofAddr, nil)) }()
	go func() { log.Fatal(srv.Serve(ln, adminLn)) }()
	log.Printf("serving %s, pprof on http://%s/debug/pprof/", ln.Addr(), *pprofAddr)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
}
