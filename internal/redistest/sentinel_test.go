package redistest

import (
	"testing"
	"time"
)

func TestSentinelLagFailover(t *testing.T) {
	s := NewSentinel(t)
	if got := s.MasterSet(); got != SentinelMasterSet {
		t.Fatalf("MasterSet = %q", got)
	}
	if n := len(s.SentinelAddrs()); n != 3 {
		t.Fatalf("%d sentinels, want 3", n)
	}
	master, replica := s.Master(), s.Replica()
	if master == replica {
		t.Fatalf("master and replica are both %s", master)
	}
	// A write the replica has before it is frozen: it must survive.
	if r, err := sentinelDo(master, "", "SET", "before", "kept"); err != nil || r != "OK" {
		t.Fatalf("SET: %v %v", r, err)
	}
	if r, err := sentinelDo(master, "", "WAIT", "1", "5000"); err != nil || r != int64(1) {
		t.Fatalf("WAIT 1 = %v %v: the replica does not follow", r, err)
	}

	start := time.Now()
	promoted := s.LagFailover(30 * time.Second)
	t.Logf("failover onto the lagging replica took %v", time.Since(start))
	if promoted != replica {
		t.Fatalf("promoted %s, want the replica %s", promoted, replica)
	}
	if r, err := sentinelDo(promoted, "", "GET", "before"); err != nil || r != "kept" {
		t.Fatalf("GET before on the promoted replica = %v %v, want kept", r, err)
	}
	last := SentinelLagKey(sentinelLagKeys - 1)
	if r, err := sentinelDo(promoted, "", "EXISTS", last); err != nil || r != int64(0) {
		t.Fatalf("EXISTS %s = %v %v: the promoted replica did not lag", last, r, err)
	}
	if r, err := sentinelDo(promoted, "", "SET", "after", "1"); err != nil || r != "OK" {
		t.Fatalf("SET on the new master: %v %v", r, err)
	}
	if _, err := sentinelDo(master, "", "PING"); err == nil {
		t.Fatalf("the old master %s still answers", master)
	}
}

func TestSentinelWithPasswords(t *testing.T) {
	s := NewSentinelWith(t, SentinelOptions{Password: "data-pw", SentinelPassword: "sentinel-pw"})
	master := s.Master()
	if _, err := sentinelDo(master, "", "SET", "k", "v"); err == nil {
		t.Fatal("the master accepted a write without AUTH")
	}
	if _, err := sentinelDo(s.SentinelAddrs()[0], "", "SENTINEL", "MASTERS"); err == nil {
		t.Fatal("a sentinel answered without AUTH")
	}
	s.Kill(master)
	if promoted := s.AwaitFailover(master, 30*time.Second); promoted == master {
		t.Fatalf("no new master")
	}
}
