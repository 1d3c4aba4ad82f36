package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// A cluster node restarted from an old snapshot: the fault that once made
// flashgate oversell (issue 12), here on one shard of a Redis Cluster.
// The nodes run without persistence, but SAVE still writes the node's
// dump.rdb, and redis-server loads a dump.rdb it finds in its directory
// when it starts, whatever its save settings.

// Save makes the node at addr write its whole dataset to dump.rdb in its
// directory now (SAVE): the snapshot RestartFromSave brings back.
func (c *Cluster) Save(addr string) {
	if c.tb != nil {
		c.tb.Helper()
	}
	if got, err := callString(addr, 30*time.Second, "SAVE"); err != nil || got != "OK" {
		c.fail("Save(%s): SAVE = %q, %v", addr, got, err)
	}
}

// RestartFromSave crashes master (SIGKILL) and starts it again after down
// on its ports, its nodes.conf and the dump.rdb of its last Save: it comes
// back as the master of its slots holding what it held at the Save, and
// every write it acknowledged since is gone. Its replica is kept from
// taking over meanwhile (cluster-replica-no-failover, set before the kill
// and cleared once the master is back), so it resyncs from the restarted
// master and the shard as a whole goes back in time, as a single server
// restarted from its snapshot does. A down shorter than the node timeout
// (2 s) keeps the rest of the cluster serving; a longer one fails the
// cluster (every slot must be covered) until the master is back. The dump
// is removed once loaded, so that a later Revive starts empty again.
// It returns the replica's address.
func (c *Cluster) RestartFromSave(master string, down time.Duration) string {
	if c.tb != nil {
		c.tb.Helper()
	}
	n := c.node(master)
	dump := filepath.Join(n.proc.Dir(), dumpFile)
	if _, err := os.Stat(dump); err != nil {
		c.fail("RestartFromSave(%s): no snapshot: %v", master, err)
	}
	replica := c.ReplicaOf(master)
	if _, err := call(replica, time.Second, "CONFIG", "SET", "cluster-replica-no-failover", "yes"); err != nil {
		c.fail("RestartFromSave(%s): replica %s: CONFIG SET cluster-replica-no-failover: %v", master, replica, err)
	}
	n.proc.Stop()
	c.setState(n, nodeDead)
	time.Sleep(down)
	err := n.proc.Start()
	if err == nil {
		c.setState(n, nodeUp)
		err = os.Remove(dump)
	}
	// The replica may take over again, whatever happened to the master.
	if _, rerr := call(replica, time.Second, "CONFIG", "SET", "cluster-replica-no-failover", "no"); err == nil && rerr != nil {
		err = fmt.Errorf("replica %s: CONFIG SET cluster-replica-no-failover no: %v", replica, rerr)
	}
	if err != nil {
		c.fail("RestartFromSave(%s): %v\n%s", master, err, c.describe())
	}
	return replica
}
