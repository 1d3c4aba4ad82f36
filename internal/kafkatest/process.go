package kafkatest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"flashgate/internal/proctest"
)

// childEnv tells a test binary started by StartProcess to be the broker:
// "PORT DIR".
const childEnv = "FLASHGATE_KAFKATEST_BROKER"

// ServeChild makes this process the broker when StartProcess started it,
// and never returns then; otherwise it returns at once. A test package
// that uses StartProcess calls it first in its TestMain.
func ServeChild() {
	spec, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	port, dir, _ := strings.Cut(spec, " ")
	p, err := strconv.Atoi(port)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kafkatest: %s=%q: %v\n", childEnv, spec, err)
		os.Exit(2)
	}
	// SyncWrites: a broker killed with SIGKILL keeps every batch it
	// acknowledged, as a real one with acks=all would.
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(p), kfake.DataDir(dir), kfake.SyncWrites(), kfake.ClusterID("kafkatest-process"))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintln(os.Stderr, "Address already in use") // proctest's ErrBind: pick another port
		}
		fmt.Fprintf(os.Stderr, "kafkatest: %v\n", err)
		os.Exit(1)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	c.Close()
	os.Exit(0)
}

// Process is a one-broker Kafka-protocol cluster (kfake) in a process of
// its own — the test binary started again, see ServeChild — so that a test
// can kill the broker the way a machine loses it (SIGKILL: every
// connection reset, nothing answers on its port) and start it again on the
// same port with its topics, messages and group offsets (kept in its
// directory).
type Process struct {
	proc *proctest.Child
	port int
}

// StartProcess starts the broker process, killed when the test ends.
func StartProcess(t testing.TB) *Process {
	t.Helper()
	dir := t.TempDir()
	p := &Process{}
	logPath := filepath.Join(dir, "broker.log")
	p.proc = proctest.NewChild(dir, false, proctest.Spec{
		Name: func() string { return fmt.Sprintf("kfake broker process on port %d", p.port) },
		Command: func() *exec.Cmd {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(p.port)+" "+filepath.Join(dir, "data"))
			return cmd
		},
		Output:  logPath,
		Log:     func() []byte { return proctest.Tail(logPath) },
		Ready:   p.dial,
		Probe:   "a TCP connection",
		Timeout: 20 * time.Second,
		Backoff: time.Millisecond,
	})
	err := p.proc.Launch(func() (err error) {
		p.port, err = proctest.FreePort()
		return err
	})
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Cleanup(p.proc.Close)
	return p
}

func (p *Process) dial() error {
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

// Addr is the broker's address, the same across restarts.
func (p *Process) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// Kill kills the broker process (SIGKILL) and waits for it to exit.
func (p *Process) Kill() { p.proc.Stop() }

// Start starts a killed broker again on its port, with its data.
func (p *Process) Start(t testing.TB) {
	t.Helper()
	if err := p.proc.Start(); err != nil {
		t.Fatalf("kafkatest: restart: %v", err)
	}
}
