package redistest

import (
	"testing"
	"time"
)

// TestRestartFromSaveTakesTheShardBack: a value saved, then overwritten
// (and replicated), comes back on the master restarted from its snapshot,
// and its replica, kept from taking over, resyncs to the old value too;
// the master keeps its slots and the cluster settles again.
func TestRestartFromSaveTakesTheShardBack(t *testing.T) {
	c := NewCluster(t)
	key := "sk:{p1}:stock"
	m := c.MasterOf(key)
	setAndWait(t, m, key, "10")
	c.Save(m)
	setAndWait(t, m, key, "7")
	setAndWait(t, m, "sk:{p1}:after", "x")

	replica := c.RestartFromSave(m, 500*time.Millisecond)
	if err := c.Settled(30 * time.Second); err != nil {
		t.Fatalf("not settled after RestartFromSave: %v", err)
	}
	if mo := c.MasterOf(key); mo != m {
		t.Fatalf("MasterOf after the restart = %s, want %s (no failover)", mo, m)
	}
	if got := rdo(t, m, "GET", key); got != "10" {
		t.Fatalf("GET %s on the restarted master = %v, want the saved 10", key, got)
	}
	if got := rdo(t, m, "GET", "sk:{p1}:after"); got != nil {
		t.Fatalf("a write after the save came back: %v", got)
	}
	rc, err := dialRESP(replica, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := rc.do("READONLY"); err != nil {
		t.Fatal(err)
	}
	if got, err := rc.do("GET", key); err != nil || got != "10" {
		t.Fatalf("GET %s on the replica %s = %v, want the saved 10 (the whole shard back in time)", key, replica, got)
	}
	if got := configGet(t, replica, "cluster-replica-no-failover"); got != "no" {
		t.Fatalf("replica's cluster-replica-no-failover = %q after the restart, want no", got)
	}
}
