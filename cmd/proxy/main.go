package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"flashgate/conf"
	"flashgate/proxy"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if cmd, word := findCommand(args); cmd != nil {
		return cmd.run(cmd, args[1:], stdout, stderr)
	} else if word != "" {
		fmt.Fprintf(stderr, "proxy: unknown command %q\n", word)
		usage(stderr)
		return 2
	}
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.Usage = func() {
		usage(stderr)
		fs.PrintDefaults()
	}
	fs.SetOutput(stderr)
	cfgPath := fs.String("c", "conf/edge.yaml", "config file")
	test := fs.Bool("t", false, "test the config file and exit (0 when valid)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	pprofAddr := fs.String("pprof", "", "serve the Go profiler on this loopback address (e.g. 127.0.0.1:6060; profiling only)")
	blockRate := fs.Int("block-rate", 0, "with -pprof: runtime.SetBlockProfileRate in ns (0: off), for /debug/pprof/block")
	// Test only: the nemesis (bench/nemesis_faults.go) skews one edge's
	// clock and puts a proxy between one edge and Redis with these.
	clockOffset := fs.Duration("test-clock-offset", 0, "TEST ONLY: run the edge's clock this far ahead (negative: behind), e.g. 2s; never in production")
	redisDial := fs.String("test-redis-dial", "", "TEST ONLY: FROM=TO,...: dial Redis at TO whenever the client would dial FROM (a fault proxy per cluster node); never in production")
	if !parseArgs(fs, args, stderr) {
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "flashgate proxy", version)
		return 0
	}
	cfgSet := false
	fs.Visit(func(f *flag.Flag) { cfgSet = cfgSet || f.Name == "c" })

	doc, path, err := loadConfig(*cfgPath, cfgSet)
	if err != nil {
		fmt.Fprintf(stderr, "proxy: configuration %s test failed:\n%s\n", *cfgPath, indentErrors(err))
		return 1
	}
	if *test {
		snap, err := proxy.Check(doc)
		if err != nil {
			fmt.Fprintf(stderr, "proxy: configuration %s test failed:\n%s\n", doc.Source, indentErrors(err))
			return 1
		}
		for _, w := range proxy.Warnings(snap) {
			fmt.Fprintf(stderr, "proxy: warning: %s\n", w)
		}
		fmt.Fprintf(stdout, "proxy: configuration %s is ok (%s)\n", doc.Source, proxy.Describe(snap))
		return 0
	}
	logger := newLogger(doc.Config.Log, stderr)
	if *pprofAddr != "" {
		if _, err := startPprof(*pprofAddr, *blockRate, logger); err != nil {
			fmt.Fprintf(stderr, "proxy: %v\n", err)
			return 2
		}
	}
	if err := checkDataDir(doc.Config); err != nil {
		fmt.Fprintf(stderr, "proxy: cannot start: %v\n", err)
		return 1
	}
	opts := proxy.Options{ConfigPath: path, Logger: logger, Version: version}
	if err := testHooks(&opts, *clockOffset, *redisDial, logger); err != nil {
		fmt.Fprintf(stderr, "proxy: %v\n", err)
		return 2
	}
	srv, err := proxy.New(doc, opts)
	if err != nil {
		fmt.Fprintf(stderr, "proxy: cannot start: %s\n", indentErrors(err))
		return 1
	}
	return serve(srv, doc, logger)
}

// loadConfig reads the file; when the default path was not given
// explicitly and does not exist, the built-in copy is used (no reloads).
func loadConfig(path string, explicit bool) (*conf.Document, string, error) {
	doc, err := conf.LoadFile(path)
	if err != nil && !explicit && errors.Is(err, os.ErrNotExist) {
		doc, err = conf.Parse(conf.DefaultYAML, "built-in edge.yaml")
		return doc, "", err
	}
	return doc, path, err
}

func serve(srv *proxy.Server, doc *conf.Document, logger *slog.Logger) int {
	cfg := doc.Config
	ln, err := net.Listen("tcp", cfg.Listen.Addr)
	if err != nil {
		logger.Error("cannot listen", "addr", cfg.Listen.Addr, "err", err)
		return 1
	}
	var adminLn net.Listener
	if cfg.Admin.Addr != "" {
		if adminLn, err = net.Listen("tcp", cfg.Admin.Addr); err != nil {
			logger.Error("cannot listen (admin)", "addr", cfg.Admin.Addr, "err", err)
			return 1
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if cfg.Reload.Watch {
		if err := srv.WatchConfig(ctx); err != nil {
			logger.Warn("cannot watch the config file; reload with SIGHUP or POST /admin/reload", "err", err)
		}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln, adminLn) }()
	logger.Info("flashgate edge started", "version", version, "listen", ln.Addr().String(), "admin", cfg.Admin.Addr, "config", doc.Source)
	for {
		select {
		case err := <-errc:
			logger.Error("listener failed", "err", err)
			return 1
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				srv.Reload("sighup")
				continue
			}
			logger.Info("shutting down: draining in-flight requests", "signal", sig.String(), "deadline", cfg.Listen.ShutdownTimeout.String())
			sctx, scancel := context.WithTimeout(context.Background(), cfg.Listen.ShutdownTimeout)
			err := srv.Shutdown(sctx)
			scancel()
			if err != nil {
				logger.Warn("shutdown deadline passed with requests still in flight", "err", err)
			}
			logger.Info("stopped")
			return 0
		}
	}
}

func newLogger(c conf.LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func indentErrors(err error) string {
	var out string
	for _, line := range splitErrors(err) {
		out += "  " + line + "\n"
	}
	return out
}
