package chtest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flashgate/internal/proctest"
)

// ErrPortsTaken is a cluster member's start that found one of its ports
// taken: every member's config names every port, so the cluster picks them
// all again.
var ErrPortsTaken = errors.New("chtest: a cluster port was taken")

// DefaultClusterName is the cluster's name in remote_servers unless the
// spec names another.
const DefaultClusterName = "flashgate"

// ClusterSpec is the shape of a cluster.
type ClusterSpec struct {
	Name     string // remote_servers name; DefaultClusterName if empty
	Shards   int    // at least 1
	Replicas int    // per shard; 1 if 0
}

// Cluster is one ZooKeeper and Shards x Replicas clickhouse-servers on
// 127.0.0.1 that know each other as one cluster (remote_servers, with
// internal_replication: a Distributed table writes one replica per shard
// and Replicated tables copy the rest), each with its macros {shard}
// ("01", "02", ...) and {replica} (unique in the whole cluster, "n1",
// "n2", ...), so that ON CLUSTER DDL and ReplicatedMergeTree paths with
// those macros work.
type Cluster struct {
	spec  ClusterSpec
	zk    *ZooKeeper
	nodes []*Server // shard-major: shard 1's replicas, then shard 2's, ...
	took  time.Duration
	dir   string
	own   bool
}

// NewCluster starts a cluster of shards shards of one replica each for the
// test; everything is killed when the test ends.
func NewCluster(t testing.TB, shards int) *Cluster {
	t.Helper()
	return NewClusterWith(t, ClusterSpec{Shards: shards})
}

// NewClusterWith starts the cluster spec describes for the test.
func NewClusterWith(t testing.TB, spec ClusterSpec) *Cluster {
	t.Helper()
	c := proctest.ForTest(t, "chtest", func(dir string, own bool) (*Cluster, error) {
		return launchCluster(dir, own, spec)
	})
	// Runs before the cluster is closed (cleanups run last first): a
	// failed test shows what the servers said.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chtest cluster logs:\n%s", c.Logs())
		}
	})
	return c
}

// Logs is the tail of every member's error log and of ZooKeeper's output.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for i, s := range c.nodes {
		fmt.Fprintf(&b, "--- member %d (%s):\n%s\n", i+1, s.Addr(), proctest.Tail(filepath.Join(s.Dir(), "log", "clickhouse-server.err.log")))
	}
	if c.zk != nil {
		fmt.Fprintf(&b, "--- zookeeper (%s):\n%s\n", c.zk.Addr(), proctest.Tail(filepath.Join(c.zk.dir, "zookeeper.log")))
	}
	return b.String()
}

// LaunchCluster starts a cluster outside any test, for TestMain; dir ""
// is a fresh temporary directory, removed by Close.
func LaunchCluster(dir string, spec ClusterSpec) (*Cluster, error) {
	return proctest.InDir(dir, "chtest-cluster-", func(dir string, own bool) (*Cluster, error) {
		return launchCluster(dir, own, spec)
	})
}

func launchCluster(dir string, own bool, spec ClusterSpec) (*Cluster, error) {
	if spec.Name == "" {
		spec.Name = DefaultClusterName
	}
	if spec.Replicas == 0 {
		spec.Replicas = 1
	}
	if spec.Shards < 1 || spec.Replicas < 1 {
		return nil, fmt.Errorf("chtest: a cluster needs at least one shard and one replica, got %d x %d", spec.Shards, spec.Replicas)
	}
	t0 := time.Now()
	c := &Cluster{spec: spec, dir: dir, own: own}
	zk, err := launchZooKeeper(filepath.Join(dir, "zookeeper"), false)
	if err != nil {
		return nil, err
	}
	c.zk = zk
	for range 5 {
		if err = c.startNodes(); !errors.Is(err, ErrPortsTaken) {
			break
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.took = time.Since(t0)
	return c, nil
}

// startNodes picks every member's ports, writes their configs and starts
// them all at once.
func (c *Cluster) startNodes() error {
	n := c.spec.Shards * c.spec.Replicas
	ports, err := proctest.FreePorts(3 * n)
	if err != nil {
		return err
	}
	var rs strings.Builder
	rs.WriteString("<remote_servers><" + c.spec.Name + ">")
	for s := range c.spec.Shards {
		rs.WriteString("<shard><internal_replication>true</internal_replication>")
		for r := range c.spec.Replicas {
			i := s*c.spec.Replicas + r
			rs.WriteString("<replica><host>127.0.0.1</host><port>" + strconv.Itoa(ports[3*i]) + "</port></replica>")
		}
		rs.WriteString("</shard>")
	}
	rs.WriteString("</" + c.spec.Name + "></remote_servers>")
	zk := fmt.Sprintf("<zookeeper><node><host>127.0.0.1</host><port>%d</port></node>"+
		"<session_timeout_ms>5000</session_timeout_ms></zookeeper>", c.zk.Port())

	for _, s := range c.nodes {
		s.Close()
	}
	c.nodes = make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		shard, replica := i/c.spec.Replicas+1, i+1
		spec := nodeSpec{ports: ports[3*i : 3*i+3], elements: map[string]string{
			"remote_servers":        rs.String(),
			"zookeeper":             zk,
			"macros":                fmt.Sprintf("<macros><shard>%02d</shard><replica>n%d</replica></macros>", shard, replica),
			"interserver_http_host": "<interserver_http_host>127.0.0.1</interserver_http_host>",
		}}
		d := filepath.Join(c.dir, fmt.Sprintf("node%d", i+1))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.nodes[i], errs[i] = launchNode(d, false, spec)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			errs[i] = c.nodes[i].awaitDDLWorker()
		}
	}
	for i, err := range errs {
		if err != nil {
			for _, s := range c.nodes {
				if s != nil {
					s.Close()
				}
			}
			c.nodes = nil
			if errors.Is(err, ErrPortsTaken) || errors.Is(err, proctest.ErrBind) {
				return ErrPortsTaken
			}
			return fmt.Errorf("cluster node %d: %w", i+1, err)
		}
	}
	return nil
}

// awaitDDLWorker waits until the server's distributed DDL worker is
// connected to ZooKeeper (it has created its queue). 18.16 answers /ping
// before that, and an ON CLUSTER statement sent in between either waits
// for the worker's next try (~10 s) or crashes the server (a segfault in
// zkutil::ZooKeeper::createImpl, seen here about one start in five).
func (s *Server) awaitDDLWorker() error {
	c := &http.Client{Timeout: time.Second}
	q := "SELECT count() FROM system.zookeeper WHERE path = '/clickhouse/task_queue' AND name = 'ddl'"
	deadline := time.Now().Add(ReadyTimeout)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		resp, err := c.Post("http://"+s.HTTPAddr()+"/", "text/plain", strings.NewReader(q))
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "1" {
				return nil
			}
			err = fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("clickhouse-server on %s: distributed DDL not connected to ZooKeeper within %v: %v", s.Addr(), ReadyTimeout, err)
		}
		// Polling the condition: the worker connects within a second.
		time.Sleep(wait)
	}
}

// Name is the cluster's name in remote_servers (what clickhouse.cluster
// names).
func (c *Cluster) Name() string { return c.spec.Name }

// Shards and Replicas are the cluster's shape.
func (c *Cluster) Shards() int   { return c.spec.Shards }
func (c *Cluster) Replicas() int { return c.spec.Replicas }

// Addrs are the members' native addresses, shard by shard: shard s
// (0-based), replica r is Addrs()[s*Replicas()+r].
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		out[i] = s.Addr()
	}
	return out
}

// Addr is Addrs joined by commas, the form clickhouse.addr takes.
func (c *Cluster) Addr() string { return strings.Join(c.Addrs(), ",") }

// Node is member i in Addrs' order (0-based).
func (c *Cluster) Node(i int) *Server { return c.nodes[i] }

// Shard is the members of shard s (0-based).
func (c *Cluster) Shard(s int) []*Server {
	return c.nodes[s*c.spec.Replicas : (s+1)*c.spec.Replicas]
}

// Stop kills member i (SIGKILL); Start brings it back on its ports with
// its data. A restarted replica takes its replicated tables back once the
// killed process's ZooKeeper session expired (session_timeout_ms 5 s) and
// then fetches what it missed: ~10 s here.
// Start also waits until the member's distributed DDL worker is back on
// ZooKeeper (see awaitDDLWorker): use it rather than Node(i).Start.
func (c *Cluster) Stop(i int) { c.nodes[i].Stop() }
func (c *Cluster) Start(i int) error {
	if err := c.nodes[i].Start(); err != nil {
		return err
	}
	return c.nodes[i].awaitDDLWorker()
}

// ZooKeeper is the cluster's ZooKeeper.
func (c *Cluster) ZooKeeper() *ZooKeeper { return c.zk }

// StartTook is how long the whole cluster took to start (ZooKeeper, then
// the members in parallel).
func (c *Cluster) StartTook() time.Duration { return c.took }

// Close kills every member and ZooKeeper and removes a directory
// LaunchCluster created. It may be called more than once.
func (c *Cluster) Close() {
	for _, s := range c.nodes {
		if s != nil {
			s.Close()
		}
	}
	if c.zk != nil {
		c.zk.Close()
	}
	if c.own {
		os.RemoveAll(c.dir)
	}
}
