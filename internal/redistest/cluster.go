package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flashgate/internal/proctest"
)

// CLIBinary is the redis-cli executable a cluster is created with.
var CLIBinary = "redis-cli"

// CLIMissingHint is the message NewCluster fails with when redis-cli is
// absent.
const CLIMissingHint = "redis-cli not found: apt-get install -y redis-tools"

// ClusterReadyTimeout bounds how long NewCluster waits for the cluster to
// serve every slot. On a quiet machine it takes about two seconds, most of
// it redis-cli's own pauses while the nodes meet.
var ClusterReadyTimeout = 60 * time.Second

// nodeTimeout is the cluster's --cluster-node-timeout: a dead master is
// failed over about twice this after it died (detection, then election).
const nodeTimeout = 2 * time.Second

// The lag LagFailover builds: it writes at least lagWrite bytes and goes on
// until lagHeld bytes of them wait in the master's own memory for the
// frozen replica (the kernel's socket buffers, up to tens of MB on
// loopback, hold the rest, and the replica reads those when it resumes).
// lagMax stays below the replica output buffer's hard limit (256 MB), so
// the master never drops the replica itself.
const (
	lagWrite = 48 << 20
	lagHeld  = 32 << 20
	lagMax   = 192 << 20
	lagValue = 1 << 20
)

// Cluster is a Redis Cluster of three masters with one replica each, every
// node a redis-server child process on 127.0.0.1. Nodes are known by their
// address; a killed node stays dead.
//
// Its methods fail the test (NewCluster) or panic with an error
// (LaunchCluster) when the cluster does not do what they wait for: the
// message says what every node reported.
type Cluster struct {
	tb  testing.TB
	dir string
	own bool

	mu     sync.Mutex
	nodes  []*clusterNode
	closed bool
}

type nodeState int

const (
	nodeUp nodeState = iota
	nodePaused
	nodeDead
)

func (s nodeState) String() string {
	return [...]string{"up", "paused", "dead"}[s]
}

type clusterNode struct {
	proc      *proctest.Child
	port, bus int
	log       string
	state     nodeState // guarded by Cluster.mu
}

func (n *clusterNode) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// NewCluster starts a 3-master + 3-replica Redis Cluster on free loopback
// ports (--cluster-enabled yes --cluster-node-timeout 2000
// --repl-diskless-sync-delay 0, no persistence), created with redis-cli
// --cluster create ... --cluster-replicas 1 --cluster-yes, and waits until
// every slot is served: cluster_state:ok on every node, the nodes agree on
// the slot map, and every replica is in sync with its master. The nodes
// are killed when the test ends.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	c := proctest.ForTest(t, "redistest", launchCluster)
	c.tb = t
	return c
}

// LaunchCluster starts the same cluster outside any test (for TestMain or
// a load tool). dir "" means a fresh temporary directory, removed by
// Close. Outside a test a method that fails panics with an error.
func LaunchCluster(dir string) (*Cluster, error) {
	return proctest.InDir(dir, "redistest-cluster-", launchCluster)
}

func launchCluster(dir string, own bool) (*Cluster, error) {
	if _, err := exec.LookPath(Binary); err != nil {
		return nil, errors.New(MissingHint)
	}
	if _, err := exec.LookPath(CLIBinary); err != nil {
		return nil, errors.New(CLIMissingHint)
	}
	c := &Cluster{dir: dir, own: own, nodes: make([]*clusterNode, 6)}
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Go(func() { c.nodes[i], errs[i] = launchNode(filepath.Join(dir, fmt.Sprintf("node%d", i+1))) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.create(); err != nil {
		c.Close()
		return nil, err
	}
	if err := retry(ClusterReadyTimeout, func() error { _, err := c.settled(true); return err }); err != nil {
		err = fmt.Errorf("cluster not ready within %v: %v\n%s", ClusterReadyTimeout, err, c.describe())
		c.Close()
		return nil, err
	}
	return c, nil
}

func launchNode(dir string) (*clusterNode, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	n := &clusterNode{log: filepath.Join(dir, "redis.log")}
	nodesConf := filepath.Join(dir, "nodes.conf")
	n.proc = proctest.NewChild(dir, false, proctest.Spec{
		Name: func() string { return fmt.Sprintf("cluster node redis-server on port %d", n.port) },
		Command: func() *exec.Cmd {
			return exec.Command(Binary,
				"--port", strconv.Itoa(n.port),
				// The bus port is picked like the client port, not
				// port+10000, which may be taken.
				"--cluster-port", strconv.Itoa(n.bus),
				"--bind", "127.0.0.1",
				"--cluster-enabled", "yes",
				"--cluster-config-file", nodesConf,
				"--cluster-node-timeout", strconv.Itoa(int(nodeTimeout/time.Millisecond)),
				// A replica's first sync starts at once, not 5 s later.
				"--repl-diskless-sync-delay", "0",
				// CLUSTER SLOTS (what cluster clients read) lists a
				// replica once its replication offset is past 0: on a
				// master nobody writes to, that is its first ping to
				// the replicas, every 10 s by default.
				"--repl-ping-replica-period", "1",
				"--save", "",
				"--appendonly", "no",
				"--daemonize", "no",
				"--dir", dir,
				"--logfile", n.log,
			)
		},
		// nodes.conf is removed before a first launch (pick, below)
		// only: Revive restarts a node with it, as the same member.
		Fresh:   []string{n.log},
		Log:     func() []byte { return proctest.Tail(n.log) },
		Ready:   func() error { return pingOwn(n.addr(), n.proc) },
		Probe:   "PING",
		Timeout: ReadyTimeout,
		Backoff: time.Millisecond,
	})
	err := n.proc.Launch(func() error {
		ports, err := proctest.FreePorts(2)
		if err != nil {
			return err
		}
		n.port, n.bus = ports[0], ports[1]
		return os.RemoveAll(nodesConf)
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// create joins the six empty nodes into a cluster: redis-cli assigns the
// slots to three masters, makes each of the others a replica of one and
// waits until the nodes have met.
func (c *Cluster) create() error {
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), ClusterReadyTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, CLIBinary, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s\n%s", CLIBinary, strings.Join(args, " "), err, tail(out, 2000), c.describe())
	}
	return nil
}

// Addrs is every node's host:port, in the order they were started (seeds
// for a cluster client). A killed node stays in the list.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr()
	}
	return addrs
}

// MasterOf is the address of the master serving key's slot now, as the
// first running node answers CLUSTER SLOTS. During a failover the nodes
// may disagree: AwaitMaster waits until they do not.
func (c *Cluster) MasterOf(key string) string {
	if c.tb != nil {
		c.tb.Helper()
	}
	slot := Slot(key)
	var last error
	for _, addr := range c.running() {
		ranges, err := slotsOf(addr)
		if err != nil {
			last = err
			continue
		}
		if r, ok := rangeOf(ranges, slot); ok {
			return r.master
		}
		last = fmt.Errorf("%s: slot %d is served by no master", addr, slot)
	}
	if last == nil {
		last = errors.New("no node is running")
	}
	c.fail("MasterOf(%q), slot %d: %v", key, slot, last)
	return ""
}

// ReplicaOf is the address of one running replica of master, as the first
// running node lists it in CLUSTER NODES.
func (c *Cluster) ReplicaOf(master string) string {
	if c.tb != nil {
		c.tb.Helper()
	}
	r, err := c.replicaOf(master)
	if err != nil {
		c.fail("ReplicaOf(%s): %v", master, err)
	}
	return r
}

func (c *Cluster) replicaOf(master string) (string, error) {
	var last error
	for _, addr := range c.running() {
		nodes, err := nodesOf(addr)
		if err != nil {
			last = err
			continue
		}
		id := ""
		for _, n := range nodes {
			if n.addr == master {
				id = n.id
			}
		}
		if id == "" {
			return "", fmt.Errorf("%s does not know %s", addr, master)
		}
		for _, n := range nodes {
			if n.master == id && !n.failed && c.stateOf(n.addr) == nodeUp {
				return n.addr, nil
			}
		}
		return "", fmt.Errorf("%s lists no running replica of %s", addr, master)
	}
	if last == nil {
		last = errors.New("no node is running")
	}
	return "", last
}

// Kill kills the node with SIGKILL, as a crash would; it stays dead.
func (c *Cluster) Kill(addr string) {
	if c.tb != nil {
		c.tb.Helper()
	}
	n := c.node(addr)
	n.proc.Stop()
	c.setState(n, nodeDead)
}

// Revive restarts a killed node on its ports with its nodes.conf and no
// data, as a crashed server that comes back without persistence: it
// rejoins the cluster as the member it was, learns that its slots moved
// to the replica promoted meanwhile, becomes that master's replica and
// syncs from it. Revive returns once it answers PING; AwaitSynced waits
// for the rest.
func (c *Cluster) Revive(addr string) {
	if c.tb != nil {
		c.tb.Helper()
	}
	n := c.node(addr)
	if err := n.proc.Start(); err != nil {
		c.fail("Revive(%s): %v\n%s", addr, err, c.describe())
	}
	c.setState(n, nodeUp)
}

// Settled waits until every running node reports cluster_state:ok, they
// agree on the slot map and every master's replica is in sync with it.
func (c *Cluster) Settled(timeout time.Duration) error {
	return retry(timeout, func() error { _, err := c.settled(true); return err })
}

// Pause freezes the node (SIGSTOP): its connections stay open, nothing is
// answered, and it sends no replication acks or cluster heartbeats.
func (c *Cluster) Pause(addr string) {
	if c.tb != nil {
		c.tb.Helper()
	}
	n := c.node(addr)
	n.proc.Pause()
	c.setState(n, nodePaused)
}

// Resume undoes Pause.
func (c *Cluster) Resume(addr string) {
	if c.tb != nil {
		c.tb.Helper()
	}
	n := c.node(addr)
	n.proc.Resume()
	c.setState(n, nodeUp)
}

// AwaitMaster waits until key's slot is served by a running master other
// than notAddr (a replica promoted after notAddr died) and the cluster has
// settled: cluster_state:ok on every running node and all of them agree on
// the slot map. It returns that master's address.
func (c *Cluster) AwaitMaster(key string, notAddr string, timeout time.Duration) string {
	if c.tb != nil {
		c.tb.Helper()
	}
	slot := Slot(key)
	var master string
	if err := retry(timeout, func() (err error) { master, err = c.newMaster(slot, notAddr); return err }); err != nil {
		c.fail("AwaitMaster(%q), slot %d, not %s: not settled within %v: %v\n%s", key, slot, notAddr, timeout, err, c.describe())
	}
	return master
}

func (c *Cluster) newMaster(slot int, notAddr string) (string, error) {
	ranges, err := c.settled(false)
	if err != nil {
		return "", err
	}
	r, _ := rangeOf(ranges, slot) // settled: every slot is served
	if r.master == notAddr {
		return "", fmt.Errorf("slot %d still served by %s", slot, notAddr)
	}
	return r.master, nil
}

// LagFailover makes key's master fail over onto a replica that lags it, as
// when a master dies before its replica got its last writes: it waits until
// the replica has applied everything the master had written when it was
// called (replication offsets), freezes the replica (SIGSTOP), writes
// filler values to the master in key's slot (at least 48 MB, and until
// 32 MB of them wait in the master's memory for the replica), kills the
// master (SIGKILL), resumes the replica and awaits its promotion
// (AwaitMaster). It returns the new master's address.
//
// Whatever clients write to the master while the filler is written is
// acknowledged to them and, past the first few MB, lost: the new master
// holds older values of keys that still exist. The filler keys
// ("{tag}redistest:filler:N") stay on the new master, those it got.
func (c *Cluster) LagFailover(key string, timeout time.Duration) string {
	if c.tb != nil {
		c.tb.Helper()
	}
	slot := Slot(key)
	master := c.MasterOf(key)
	replica := c.ReplicaOf(master)
	if err := caughtUp(master, replica, timeout); err != nil {
		c.fail("LagFailover(%q): %v\n%s", key, err, c.describe())
	}
	c.Pause(replica)
	if err := fill(master, slot); err != nil {
		c.Resume(replica)
		c.fail("LagFailover(%q): filling %s: %v\n%s", key, master, err, c.describe())
	}
	c.Kill(master)
	c.Resume(replica)
	return c.AwaitMaster(key, master, timeout)
}

// caughtUp waits until replica has applied what master had written when
// it was called. (WAIT would not do: it counts acknowledgements of the
// writes of its own connection only.)
func caughtUp(master, replica string, timeout time.Duration) error {
	info, err := callString(master, time.Second, "INFO", "replication")
	if err != nil {
		return fmt.Errorf("%s: INFO replication: %v", master, err)
	}
	want, _ := strconv.ParseInt(infoField(info, "master_repl_offset"), 10, 64)
	var got int64
	err = retry(timeout, func() error {
		info, err := callString(replica, time.Second, "INFO", "replication")
		if err != nil {
			return err
		}
		got, _ = strconv.ParseInt(infoField(info, "slave_repl_offset"), 10, 64)
		if got < want {
			return fmt.Errorf("replica %s at offset %d, master %s at %d", replica, got, master, want)
		}
		return nil
	})
	return err
}

// fill writes filler values in slot to master until the replication stream
// holds lagHeld bytes its (frozen) replica has not received.
func fill(master string, slot int) error {
	rc, err := dialRESP(master, 10*time.Second)
	if err != nil {
		return err
	}
	defer rc.Close()
	prefix := "{" + tagFor(slot) + "}redistest:filler:"
	value := strings.Repeat("x", lagValue)
	held := 0
	for written, i := 0, 0; written < lagWrite || held < lagHeld; i++ {
		if written >= lagMax {
			return fmt.Errorf("wrote %d MB, yet only %d MB wait for the replica", written>>20, held>>20)
		}
		if _, err := rc.do("SET", prefix+strconv.Itoa(i), value); err != nil {
			return err
		}
		written += lagValue
		if written >= lagWrite {
			if held, err = replicaBacklog(rc); err != nil {
				return err
			}
		}
	}
	return nil
}

// replicaBacklog is the largest output buffer the master holds for one of
// its replicas (CLIENT LIST TYPE replica, omem): replication data the
// replica has not taken, in the master's memory only.
func replicaBacklog(rc *respConn) (int, error) {
	v, err := rc.do("CLIENT", "LIST", "TYPE", "replica")
	if err != nil {
		return 0, err
	}
	list, _ := v.(string)
	most := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "omem="); ok {
				n, _ := strconv.Atoi(v)
				most = max(most, n)
			}
		}
	}
	return most, nil
}

// Close kills every node and removes a directory LaunchCluster created. It
// may be called more than once.
func (c *Cluster) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	for _, n := range c.nodes {
		if n != nil {
			n.proc.Close()
		}
	}
	if c.own {
		os.RemoveAll(c.dir)
	}
}

// settled checks that the cluster serves every slot: every running node
// says cluster_state:ok and lists all 16384 slots in CLUSTER SLOTS, each
// range with a running master, and all of them list the same masters.
// withReplicas also wants every node to know a replica of each master and
// every replica to be in sync with its master (the cluster as created). It returns the agreed slot map.
func (c *Cluster) settled(withReplicas bool) ([]slotRange, error) {
	var agreed []slotRange
	var first string
	for _, addr := range c.running() {
		info, err := callString(addr, time.Second, "CLUSTER", "INFO")
		if err != nil {
			return nil, fmt.Errorf("%s: CLUSTER INFO: %v", addr, err)
		}
		if st := infoField(info, "cluster_state"); st != "ok" {
			return nil, fmt.Errorf("%s: cluster_state:%s", addr, st)
		}
		ranges, err := slotsOf(addr)
		if err != nil {
			return nil, err
		}
		covered := 0
		for _, r := range ranges {
			covered += r.to - r.from + 1
			if st := c.stateOf(r.master); st != nodeUp {
				return nil, fmt.Errorf("%s: slots %d-%d served by %s, which is %v", addr, r.from, r.to, r.master, st)
			}
		}
		if covered != Slots {
			return nil, fmt.Errorf("%s: %d of %d slots served", addr, covered, Slots)
		}
		if agreed == nil {
			agreed, first = ranges, addr
		} else if a, b := masters(agreed), masters(ranges); a != b {
			return nil, fmt.Errorf("nodes disagree: %s sees %s, %s sees %s", first, a, addr, b)
		}
		if withReplicas {
			if err := replicated(addr, ranges); err != nil {
				return nil, err
			}
			repl, err := callString(addr, time.Second, "INFO", "replication")
			if err != nil {
				return nil, fmt.Errorf("%s: INFO replication: %v", addr, err)
			}
			// After the first sync (diskless) a master sends a
			// replica the writes that follow only once the replica
			// acknowledged the snapshot, up to a second later: a
			// master killed before would take them with it. The
			// masters sync at offset 0 and ping their replicas every
			// second, so an offset past 0 is a replica that streams.
			if infoField(repl, "role") == "slave" && (infoField(repl, "master_link_status") != "up" || infoField(repl, "slave_repl_offset") == "0") {
				return nil, fmt.Errorf("%s: replica not streaming yet (master_link_status:%s, slave_repl_offset:%s)", addr, infoField(repl, "master_link_status"), infoField(repl, "slave_repl_offset"))
			}
		}
	}
	if agreed == nil {
		return nil, errors.New("no node is running")
	}
	return agreed, nil
}

// replicated checks that the node at addr knows a replica, not failed, of
// each master in ranges (CLUSTER NODES): the others learn of a replica's
// role through the cluster's gossip, a moment after it was made one.
func replicated(addr string, ranges []slotRange) error {
	nodes, err := nodesOf(addr)
	if err != nil {
		return err
	}
	replicas := map[string]int{} // master id -> replicas
	ids := map[string]string{}   // addr -> id
	for _, n := range nodes {
		ids[n.addr] = n.id
		if n.master != "" && !n.failed {
			replicas[n.master]++
		}
	}
	for _, r := range ranges {
		if replicas[ids[r.master]] == 0 {
			return fmt.Errorf("%s knows no replica of %s yet", addr, r.master)
		}
	}
	return nil
}

// describe is every node's state and the cluster's view (CLUSTER NODES of
// the first running node), and the end of each node's log, for failure
// messages.
func (c *Cluster) describe() string {
	var b strings.Builder
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		st := c.stateOf(n.addr())
		fmt.Fprintf(&b, "node %s (%v):", n.addr(), st)
		if st == nodeUp {
			if info, err := callString(n.addr(), time.Second, "CLUSTER", "INFO"); err == nil {
				fmt.Fprintf(&b, " cluster_state:%s", infoField(info, "cluster_state"))
			}
		}
		fmt.Fprintf(&b, "\n  log: %s\n", strings.ReplaceAll(string(tail(proctest.Tail(n.log), 600)), "\n", "\n  log: "))
	}
	for _, addr := range c.running() {
		if nodes, err := callString(addr, time.Second, "CLUSTER", "NODES"); err == nil {
			fmt.Fprintf(&b, "CLUSTER NODES on %s:\n%s", addr, nodes)
			break
		}
	}
	return b.String()
}

func (c *Cluster) fail(format string, args ...any) {
	if c.tb != nil {
		c.tb.Helper()
		c.tb.Fatalf("redistest: "+format, args...)
	}
	panic(fmt.Errorf("redistest: "+format, args...))
}

func (c *Cluster) node(addr string) *clusterNode {
	if c.tb != nil {
		c.tb.Helper()
	}
	for _, n := range c.nodes {
		if n != nil && n.addr() == addr {
			return n
		}
	}
	c.fail("%s is no node of this cluster (%v)", addr, c.Addrs())
	return nil
}

func (c *Cluster) setState(n *clusterNode, st nodeState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n.state = st
}

// stateOf is the state of the node at addr; an address that is no node of
// the cluster counts as dead.
func (c *Cluster) stateOf(addr string) nodeState {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n != nil && n.addr() == addr {
			return n.state
		}
	}
	return nodeDead
}

// running is the addresses of the nodes neither paused nor killed: the
// ones that answer.
func (c *Cluster) running() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var addrs []string
	for _, n := range c.nodes {
		if n != nil && n.state == nodeUp {
			addrs = append(addrs, n.addr())
		}
	}
	return addrs
}

// slotRange is one entry of CLUSTER SLOTS.
type slotRange struct {
	from, to int
	master   string
	replicas []string
}

func rangeOf(ranges []slotRange, slot int) (slotRange, bool) {
	for _, r := range ranges {
		if r.from <= slot && slot <= r.to {
			return r, true
		}
	}
	return slotRange{}, false
}

// masters is the slot map without the replicas, in slot order, to compare
// two nodes' views.
func masters(ranges []slotRange) string {
	rs := slices.Clone(ranges)
	slices.SortFunc(rs, func(a, b slotRange) int { return a.from - b.from })
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "%d-%d:%s ", r.from, r.to, r.master)
	}
	return strings.TrimSpace(b.String())
}

// slotsOf asks the node at addr for its slot map. Each CLUSTER SLOTS entry
// is [from, to, master, replica...], each node [ip, port, id, ...].
func slotsOf(addr string) ([]slotRange, error) {
	v, err := call(addr, time.Second, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER SLOTS: %v", addr, err)
	}
	entries, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: CLUSTER SLOTS answered %T", addr, v)
	}
	ranges := make([]slotRange, 0, len(entries))
	for _, e := range entries {
		f, ok := e.([]any)
		if !ok || len(f) < 3 {
			return nil, fmt.Errorf("%s: CLUSTER SLOTS entry %v", addr, e)
		}
		from, ok1 := f[0].(int64)
		to, ok2 := f[1].(int64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%s: CLUSTER SLOTS entry %v", addr, e)
		}
		r := slotRange{from: int(from), to: int(to)}
		for i, n := range f[2:] {
			a, err := slotNode(n)
			if err != nil {
				return nil, fmt.Errorf("%s: CLUSTER SLOTS entry %v: %v", addr, e, err)
			}
			if i == 0 {
				r.master = a
			} else {
				r.replicas = append(r.replicas, a)
			}
		}
		ranges = append(ranges, r)
	}
	return ranges, nil
}

// clusterNodeLine is one line of CLUSTER NODES: "id ip:port@bus flags
// master-id ...".
type clusterNodeLine struct {
	id, addr, master string
	failed           bool
}

func nodesOf(addr string) ([]clusterNodeLine, error) {
	text, err := callString(addr, time.Second, "CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %v", addr, err)
	}
	var nodes []clusterNodeLine
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			return nil, fmt.Errorf("%s: CLUSTER NODES line %q", addr, line)
		}
		hostPort, _, _ := strings.Cut(f[1], "@")
		n := clusterNodeLine{id: f[0], addr: hostPort}
		if f[3] != "-" {
			n.master = f[3]
		}
		for _, flag := range strings.Split(f[2], ",") {
			n.failed = n.failed || flag == "fail" || flag == "fail?"
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

func slotNode(v any) (string, error) {
	f, ok := v.([]any)
	if !ok || len(f) < 2 {
		return "", fmt.Errorf("node %v", v)
	}
	ip, ok1 := f[0].(string)
	port, ok2 := f[1].(int64)
	if !ok1 || !ok2 {
		return "", fmt.Errorf("node %v", v)
	}
	return net.JoinHostPort(ip, strconv.FormatInt(port, 10)), nil
}

// infoField is the value of name in an INFO or CLUSTER INFO reply.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// retry calls f until it returns nil or within has passed, pausing 1 ms,
// 2 ms, ... up to 50 ms between calls; it returns f's last error.
func retry(within time.Duration, f func() error) error {
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return b
}
