package chtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"flashgate/internal/proctest"
)

// ZooKeeperJar is Debian's ZooKeeper (package zookeeper); Java is the JVM
// that runs it.
var (
	ZooKeeperJar = "/usr/share/java/zookeeper.jar"
	Java         = "java"
)

// ZooKeeperHint is the message a test fails with when ZooKeeper is absent.
const ZooKeeperHint = "zookeeper not found: apt-get install -y --no-install-recommends zookeeper"

// ZooKeeper is one standalone ZooKeeper child process on 127.0.0.1: what
// ClickHouse 18.16 needs for Replicated tables and ON CLUSTER DDL (it has
// no Keeper of its own). Its port and data stay the same across
// Stop/Start.
type ZooKeeper struct {
	proc *proctest.Child
	dir  string
	port int
}

// NewZooKeeper starts a ZooKeeper for the test; it is killed when the
// test ends.
func NewZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	return proctest.ForTest(t, "chtest", launchZooKeeper)
}

// LaunchZooKeeper starts a ZooKeeper outside any test (dir "" is a fresh
// temporary directory, removed by Close).
func LaunchZooKeeper(dir string) (*ZooKeeper, error) {
	return proctest.InDir(dir, "chtest-zk-", launchZooKeeper)
}

func launchZooKeeper(dir string, own bool) (*ZooKeeper, error) {
	java, err := exec.LookPath(Java)
	if err != nil {
		return nil, errors.New(ZooKeeperHint)
	}
	if _, err := os.Stat(ZooKeeperJar); err != nil {
		return nil, errors.New(ZooKeeperHint)
	}
	z := &ZooKeeper{dir: dir}
	out := filepath.Join(dir, "zookeeper.log")
	cfg := filepath.Join(dir, "zoo.cfg")
	z.proc = proctest.NewChild(dir, own, proctest.Spec{
		Name: func() string { return fmt.Sprintf("zookeeper (port %d)", z.port) },
		Command: func() *exec.Cmd {
			// A small serial-GC heap and the client compiler: the JVM
			// starts faster and a test needs no throughput from it.
			cmd := exec.Command(java, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
				"-Dzookeeper.log.dir="+dir, "-cp", ZooKeeperJar,
				"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg)
			cmd.Dir = dir
			return cmd
		},
		Output:  out,
		Log:     func() []byte { return proctest.Tail(out) },
		Ready:   z.serving,
		Probe:   "srvr",
		Timeout: ReadyTimeout,
		Backoff: 5 * time.Millisecond,
	})
	err = z.proc.Launch(func() error {
		p, err := proctest.FreePort()
		if err != nil {
			return err
		}
		z.port = p
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			return err
		}
		// A short tick lets sessions of killed ClickHouse servers expire
		// within seconds (session timeouts are 2 to 20 ticks).
		return os.WriteFile(cfg, []byte(fmt.Sprintf(
			"tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
				"admin.enableServer=false\n4lw.commands.whitelist=srvr\nmaxSessionTimeout=30000\n",
			filepath.Join(dir, "data"), z.port)), 0o644)
	})
	if err != nil {
		return nil, err
	}
	return z, nil
}

// serving asks ZooKeeper's four-letter "srvr": it names the mode once the
// server takes sessions ("ruok" says imok earlier, while a client's
// handshake still fails, and ClickHouse's DDL worker then waits long
// before it tries again).
func (z *ZooKeeper) serving() error {
	c, err := net.DialTimeout("tcp", z.Addr(), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return err
	}
	b, _ := io.ReadAll(io.LimitReader(c, 4096))
	if !bytes.Contains(b, []byte("Mode: standalone")) {
		return fmt.Errorf("srvr answered %q", b)
	}
	return nil
}

// Addr is host:port of the client port.
func (z *ZooKeeper) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(z.port)) }

// Port is the client port.
func (z *ZooKeeper) Port() int { return z.port }

// StartTook is how long the last (re)start took until it served.
func (z *ZooKeeper) StartTook() time.Duration { return z.proc.StartTook() }

// Stop kills ZooKeeper (SIGKILL); Start brings it back with its data.
func (z *ZooKeeper) Stop() { z.proc.Stop() }

// Start restarts a stopped ZooKeeper on the same port.
func (z *ZooKeeper) Start() error { return z.proc.Start() }

// Close kills ZooKeeper for good and removes a directory Launch created.
func (z *ZooKeeper) Close() { z.proc.Close() }
