package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"golang.org/x/sys/unix"

	"flashgate/conf"
	"flashgate/internal/kafkatest"
	"flashgate/orders/broker"
)

func main() {
	raiseFileLimit()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// raiseFileLimit lifts the soft limit on open files to the hard one: a
// burst holds a connection per shopper (the children inherit it).
func raiseFileLimit() {
	var l unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		unix.Setrlimit(unix.RLIMIT_NOFILE, &l)
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  bench run -s SCENARIO [flags]   run a scenario (bench/scenarios/SCENARIO.yaml or a path)
  bench compare [flags]           flashgate against its peers, same load, one run, ratio table
  bench deadlines [flags]         the pay-deadline sweep: releases/s and lateness, 1 and 2 edges
  bench list                      the scenarios
  bench check HISTORY.json        run the nemesis checker again over a kept schedule's history
  bench run -h | bench compare -h the flags
`)
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stdout, stderr)
	case "compare":
		return cmdCompare(args[1:], stdout, stderr)
	case "deadlines":
		return cmdDeadlines(args[1:], stdout, stderr)
	case "list":
		root, err := moduleRoot()
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		for _, n := range listScenarios(root) {
			sc, err := loadScenario(resolveScenario(root, n), nil)
			if err != nil {
				fmt.Fprintf(stdout, "%-10s (invalid: %v)\n", n, err)
				continue
			}
			fmt.Fprintf(stdout, "%-10s %s\n", n, sc.Description)
		}
		return 0
	case "kfake":
		return cmdKfake(args[1:], stderr)
	case "check":
		return cmdCheck(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	}
	if strings.HasPrefix(args[0], "-") {
		return cmdRun(args, stdout, stderr) // `bench -s normal`
	}
	fmt.Fprintf(stderr, "bench: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

// moduleRoot is the directory of flashgate's go.mod, found upwards from
// the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module flashgate") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run bench inside the flashgate module (no go.mod of module flashgate above the working directory)")
		}
		dir = parent
	}
}

// signalContext is cancelled on Ctrl-C or SIGTERM; a second Ctrl-C while
// bench tears down is ignored so the teardown completes.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s, ok := <-sigs
		if ok {
			fmt.Fprintf(os.Stderr, "\nbench: %v: stopping, tearing everything down\n", s)
			cancel()
		}
	}()
	return ctx, func() { signal.Stop(sigs); cancel() }
}

// pinSelf moves every thread of this process to cpu.
func pinSelf(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return err
		}
	}
	return nil
}

// setAffinity pins every thread of pid to cpu, or lets it float on every
// CPU (cpu < 0).
func setAffinity(pid, cpu int) error {
	var set unix.CPUSet
	if cpu >= 0 {
		set.Set(cpu)
	} else {
		for i := range runtime.NumCPU() {
			set.Set(i)
		}
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			unix.SchedSetaffinity(tid, &set)
		}
	}
	return nil
}

// cmdKfake runs the Kafka-protocol broker (kfake) bench starts for a run
// when the edge should not carry it: `bench kfake -port P`, or several
// brokers with `-ports P1,P2,P3` and a control listener (-control ADDR:
// POST /stop?node=N and /start?node=N take one broker away and bring it
// back, for the nemesis scenario).
func cmdKfake(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench kfake", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", 0, "port on 127.0.0.1")
	ports := fs.String("ports", "", "several brokers: their ports on 127.0.0.1, comma-separated (instead of -port)")
	control := fs.String("control", "", "with -ports: the control listener's host:port")
	parts := fs.Int("partitions", 6, "partitions of the orders topic")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	k := conf.Defaults().Kafka
	topics := broker.Topics(k.Topic, k.DLQTopic, *parts)
	var brokers []string
	var stop func()
	var err error
	if *ports != "" {
		brokers, stop, err = kfakeCluster(*ports, *control, topics)
	} else {
		brokers, stop, err = broker.StartEmbeddedWith(broker.EmbeddedConfig{Port: *port, Topics: topics})
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench kfake:", err)
		return 1
	}
	fmt.Fprintln(stderr, "kfake on", strings.Join(brokers, ","))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
	stop()
	return 0
}

// kfakeCluster starts one broker per port (internal/kafkatest: a stopped
// broker's connections close as a dead process's would) and the control
// listener.
func kfakeCluster(portList, control string, topics []broker.Topic) ([]string, func(), error) {
	var ps []int
	for _, f := range strings.Split(portList, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, nil, fmt.Errorf("-ports %q: %v", portList, err)
		}
		ps = append(ps, p)
	}
	c, err := kafkatest.LaunchCluster(len(ps), kfake.Ports(ps...), kfake.ClusterID("flashgate-bench"))
	if err != nil {
		return nil, nil, err
	}
	brokers := c.Brokers()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := broker.EnsureTopics(ctx, brokers, broker.Security{}, broker.Replicated(topics, len(ps), 1)...); err != nil {
		c.Close()
		return nil, nil, err
	}
	var srv *http.Server
	if control != "" {
		mux := http.NewServeMux()
		node := func(w http.ResponseWriter, r *http.Request, f func(int32) error) {
			n, err := strconv.Atoi(r.URL.Query().Get("node"))
			if err == nil {
				err = f(int32(n))
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusConflict)
			}
		}
		mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) { node(w, r, c.StopBrokerErr) })
		mux.HandleFunc("POST /start", func(w http.ResponseWriter, r *http.Request) { node(w, r, c.StartBrokerErr) })
		ln, err := net.Listen("tcp", control)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
	}
	return brokers, func() {
		if srv != nil {
			srv.Close()
		}
		c.Close()
	}, nil
}
