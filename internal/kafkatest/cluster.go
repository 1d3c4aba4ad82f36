package kafkatest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Cluster is a kfake cluster of several brokers on loopback whose brokers
// stop and start again the way a broker process dies and comes back.
//
// StopBroker closes the broker's listener and every connection clients
// have open to it: kfake's own RemoveNode closes only the listener, and a
// client's established connection to a removed broker would go on being
// served, which no dead broker does. kfake then moves the leadership of
// every partition (and the group coordinators, which it hashes over the
// live brokers) to the others. StartBroker brings the broker back under
// the same node id and port, and kfake moves the leaders again.
//
// What kfake does not model is replication: its brokers serve one shared
// log, so a stopped broker loses nothing, and a topic's replication
// factor is bookkeeping (metadata lists that many replicas, as many as
// brokers are up; min.insync.replicas is a topic config nothing enforces).
// A test on a Cluster proves that clients survive a broker going and
// coming back — routing, reconnects, leader and coordinator moves — not
// that Kafka keeps copies.
type Cluster struct {
	*kfake.Cluster
	tb      testing.TB
	brokers []string // every broker's address, as at start

	mu   sync.Mutex
	port map[int32]int             // node id -> port
	lns  map[int]*trackingListener // port -> the listener serving it now
	down map[int32]bool
}

// StartCluster starts an n-broker kfake cluster (node ids 0..n-1) on free
// loopback ports, closed when the test ends. Topics are not auto-created:
// create them (broker.EnsureTopics, with a replication factor up to n) or
// pass kfake.SeedTopics. opts come after the defaults and may not set
// kfake.ListenFn (the cluster's own) or kfake.Ports.
func StartCluster(t testing.TB, n int, opts ...kfake.Opt) *Cluster {
	t.Helper()
	c, err := LaunchCluster(n, opts...)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Cleanup(c.Close)
	c.tb = t
	return c
}

// LaunchCluster starts the same cluster outside any test (a load tool);
// Close stops it. Outside a test StopBroker and StartBroker return their
// failure as a panic with an error (StopBrokerErr, StartBrokerErr return
// it).
func LaunchCluster(n int, opts ...kfake.Opt) (*Cluster, error) {
	c := &Cluster{port: map[int32]int{}, lns: map[int]*trackingListener{}, down: map[int32]bool{}}
	all := append([]kfake.Opt{kfake.NumBrokers(n), kfake.ListenFn(c.listen)}, opts...)
	kc, err := kfake.NewCluster(all...)
	if err != nil {
		return nil, err
	}
	c.Cluster = kc
	// kfake numbers its brokers 0..n-1 in the order ListenAddrs lists them.
	c.brokers = kc.ListenAddrs()
	for i, a := range c.brokers {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			kc.Close()
			return nil, fmt.Errorf("broker address %q: %v", a, err)
		}
		c.port[int32(i)], _ = strconv.Atoi(p)
	}
	return c, nil
}

// Brokers is every broker's address, stopped ones included: the bootstrap
// list a client is configured with.
func (c *Cluster) Brokers() []string { return append([]string(nil), c.brokers...) }

// Addr is broker node's address.
func (c *Cluster) Addr(node int32) string { return c.brokers[node] }

// StopBroker takes broker node out of the cluster: its listener and every
// connection to it are closed, and the partitions it led get other
// leaders. The test fails if node is not a running broker.
func (c *Cluster) StopBroker(node int32) {
	if c.tb != nil {
		c.tb.Helper()
	}
	c.must(c.StopBrokerErr(node))
}

// StopBrokerErr is StopBroker returning its failure.
func (c *Cluster) StopBrokerErr(node int32) error {
	c.mu.Lock()
	_, known := c.port[node]
	wasDown := c.down[node]
	c.mu.Unlock()
	if !known || wasDown {
		return fmt.Errorf("kafkatest: broker %d is not running", node)
	}
	// RemoveNode closes the broker's listener, a trackingListener, which
	// closes the connections it accepted.
	if err := c.RemoveNode(node); err != nil {
		return fmt.Errorf("kafkatest: stop broker %d: %v", node, err)
	}
	c.mu.Lock()
	c.down[node] = true
	c.mu.Unlock()
	return nil
}

// StartBroker brings a stopped broker back, with its node id and port;
// kfake chooses every partition's leader again among the brokers up.
func (c *Cluster) StartBroker(node int32) {
	if c.tb != nil {
		c.tb.Helper()
	}
	c.must(c.StartBrokerErr(node))
}

// StartBrokerErr is StartBroker returning its failure.
func (c *Cluster) StartBrokerErr(node int32) error {
	c.mu.Lock()
	port, known := c.port[node]
	wasDown := c.down[node]
	c.mu.Unlock()
	if !known || !wasDown {
		return fmt.Errorf("kafkatest: broker %d is not stopped", node)
	}
	if _, _, err := c.AddNode(node, port); err != nil {
		return fmt.Errorf("kafkatest: start broker %d on port %d: %v", node, port, err)
	}
	c.mu.Lock()
	c.down[node] = false
	c.mu.Unlock()
	return nil
}

// must fails the test with err, or outside a test panics with it.
func (c *Cluster) must(err error) {
	if err == nil {
		return
	}
	if c.tb != nil {
		c.tb.Helper()
		c.tb.Fatal(err)
	}
	panic(err)
}

// OpenConns is how many client connections broker node has open.
func (c *Cluster) OpenConns(node int32) int {
	c.mu.Lock()
	ln := c.lns[c.port[node]]
	c.mu.Unlock()
	if ln == nil {
		return 0
	}
	return ln.open()
}

// listen is the cluster's kfake.ListenFn: net.Listen, wrapped so that
// closing the listener closes its connections too.
func (c *Cluster) listen(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	_, p, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("kafkatest: listener address %q: %w", ln.Addr(), err)
	}
	port, _ := strconv.Atoi(p)
	tl := &trackingListener{Listener: ln, conns: map[net.Conn]struct{}{}}
	c.mu.Lock()
	c.lns[port] = tl
	c.mu.Unlock()
	return tl, nil
}

// trackingListener is a broker's listener that remembers the connections
// it accepted, and closes them when it is closed.
type trackingListener struct {
	net.Listener
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func (l *trackingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		conn.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: conn, l: l}
	l.conns[tc] = struct{}{}
	return tc, nil
}

// Close stops accepting and closes every connection still open, as the
// death of the broker's process would.
func (l *trackingListener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = map[net.Conn]struct{}{}
	l.mu.Unlock()
	for conn := range conns {
		conn.(*trackedConn).Conn.Close()
	}
	return err
}

func (l *trackingListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// trackedConn leaves its listener's set when it is closed.
type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// Group is a consumer group as its coordinator describes it.
type Group struct {
	State string // Stable, PreparingRebalance, CompletingRebalance, Empty, Dead
	// Members maps each member id to the partitions assigned to it (of
	// every topic).
	Members map[string][]int
}

// Stable reports whether the group is Stable with n members, each of
// which has at least one partition.
func (g Group) Stable(n int) bool {
	if g.State != "Stable" || len(g.Members) != n {
		return false
	}
	for _, parts := range g.Members {
		if len(parts) == 0 {
			return false
		}
	}
	return true
}

// DescribeGroup asks the group's coordinator for the group.
func (c *Cluster) DescribeGroup(group string) (Group, error) {
	node := c.CoordinatorFor(group)
	if node < 0 {
		return Group{}, fmt.Errorf("kafkatest: no coordinator for group %s", group)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cl := &kafka.Client{Addr: kafka.TCP(c.Addr(node)), Timeout: 2 * time.Second}
	res, err := cl.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return Group{}, fmt.Errorf("kafkatest: describe group %s on broker %d: %w", group, node, err)
	}
	for _, g := range res.Groups {
		if g.GroupID != group {
			continue
		}
		if g.Error != nil {
			return Group{}, fmt.Errorf("kafkatest: describe group %s on broker %d: %w", group, node, g.Error)
		}
		out := Group{State: g.GroupState, Members: map[string][]int{}}
		for _, m := range g.Members {
			var parts []int
			for _, t := range m.MemberAssignments.Topics {
				parts = append(parts, t.Partitions...)
			}
			out.Members[m.MemberID] = parts
		}
		return out, nil
	}
	return Group{}, fmt.Errorf("kafkatest: broker %d does not describe group %s", node, group)
}

// Topic is a topic as the brokers describe it.
type Topic struct {
	Partitions int
	// Replicas is the fewest replicas any partition lists (kfake lists
	// the topic's replication factor, capped at the brokers up).
	Replicas int
	// MinInsyncReplicas is the topic's min.insync.replicas ("" when the
	// broker does not say).
	MinInsyncReplicas string
}

// DescribeTopic asks a running broker for topic's partitions and its
// min.insync.replicas.
func (c *Cluster) DescribeTopic(topic string) (Topic, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := &kafka.Client{Addr: kafka.TCP(c.up()...), Timeout: 5 * time.Second}
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return Topic{}, fmt.Errorf("kafkatest: metadata of %s: %w", topic, err)
	}
	var out Topic
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return Topic{}, fmt.Errorf("kafkatest: metadata of %s: %w", topic, t.Error)
		}
		out.Partitions = len(t.Partitions)
		for i, p := range t.Partitions {
			if i == 0 || len(p.Replicas) < out.Replicas {
				out.Replicas = len(p.Replicas)
			}
		}
	}
	if out.Partitions == 0 {
		return Topic{}, fmt.Errorf("kafkatest: no topic %s", topic)
	}
	res, err := cl.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{"min.insync.replicas"}}}})
	if err != nil {
		return Topic{}, fmt.Errorf("kafkatest: configs of %s: %w", topic, err)
	}
	for _, r := range res.Resources {
		for _, e := range r.ConfigEntries {
			if e.ConfigName == "min.insync.replicas" {
				out.MinInsyncReplicas = e.ConfigValue
			}
		}
	}
	return out, nil
}

// up is the addresses of the brokers running now.
func (c *Cluster) up() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for i, a := range c.brokers {
		if !c.down[int32(i)] {
			out = append(out, a)
		}
	}
	return out
}
