package redistest

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"flashgate/internal/await"
)

func TestSlotIsCRC16OfTheHashTag(t *testing.T) {
	// The check value of CRC-16/XMODEM, and slots from the CLUSTER KEYSLOT
	// documentation.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]int{
		"somekey":         11058,
		"foo{hash_tag}":   2515,
		"bar{hash_tag}":   2515,
		"{hash_tag}":      2515,
		"x{hash_tag}y{z}": 2515,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if Slot("{}hash_tag") == Slot("hash_tag") {
		t.Error(`an empty tag "{}" must not hash as the rest of the key`)
	}
}

// rdo sends one command to addr on a fresh connection.
func rdo(t *testing.T, addr string, args ...string) any {
	t.Helper()
	v, err := call(addr, 2*time.Second, args...)
	if err != nil {
		t.Fatalf("%s on %s: %v", strings.Join(args, " "), addr, err)
	}
	return v
}

// setAndWait sets key on master and waits until a replica acknowledged it
// (WAIT counts the writes of its own connection).
func setAndWait(t *testing.T, master, key, value string) {
	t.Helper()
	rc, err := dialRESP(master, 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got, err := rc.do("SET", key, value); err != nil || got != "OK" {
		t.Fatalf("SET %s on its master %s: %v %v", key, master, got, err)
	}
	if n, err := rc.do("WAIT", "1", "5000"); err != nil || n != int64(1) {
		t.Fatalf("WAIT 1 on %s = %v %v", master, n, err)
	}
}

func TestClusterServesEachKeyOnItsMaster(t *testing.T) {
	c := NewCluster(t)
	addrs := c.Addrs()
	if len(addrs) != 6 {
		t.Fatalf("Addrs = %v, want 6 nodes", addrs)
	}
	for _, a := range addrs {
		info := rdo(t, a, "CLUSTER", "INFO").(string)
		if st := infoField(info, "cluster_state"); st != "ok" {
			t.Fatalf("%s: cluster_state:%s after NewCluster", a, st)
		}
	}

	masters := map[string]bool{}
	for _, key := range []string{"sk:{p1}:stock", "sk:{p2}:stock", "sk:{p3}:stock", "plain", "{}x", "a{b}c{d}", "{"} {
		if got := rdo(t, addrs[0], "CLUSTER", "KEYSLOT", key); got != int64(Slot(key)) {
			t.Fatalf("Slot(%q) = %d, the server says %v", key, Slot(key), got)
		}
		m := c.MasterOf(key)
		masters[m] = true
		setAndWait(t, m, key, "v-"+key)
		if got := rdo(t, m, "GET", key); got != "v-"+key {
			t.Fatalf("GET %s on %s = %v", key, m, got)
		}
		// Every other master sends the client to m.
		moved := "MOVED " + strconv.Itoa(Slot(key)) + " " + m
		for _, a := range addrs {
			if a == m || infoField(rdo(t, a, "INFO", "replication").(string), "role") != "master" {
				continue
			}
			if _, err := call(a, 2*time.Second, "GET", key); err == nil || err.Error() != moved {
				t.Fatalf("GET %s on %s: %v, want %q", key, a, err, moved)
			}
		}
		// Its replica has it too, once it acknowledged the write.
		r := c.ReplicaOf(m)
		if r == m {
			t.Fatalf("ReplicaOf(%s) = itself", m)
		}
		rc, err := dialRESP(r, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rc.do("READONLY"); err != nil {
			t.Fatal(err)
		}
		got, err := rc.do("GET", key)
		rc.Close()
		if err != nil || got != "v-"+key {
			t.Fatalf("GET %s on replica %s = %v %v", key, r, got, err)
		}
	}
	if len(masters) != 3 {
		t.Fatalf("the keys landed on %d masters (%v), want the 3", len(masters), masters)
	}

	r := c.ReplicaOf(c.MasterOf("plain"))
	c.Pause(r)
	if _, err := call(r, 300*time.Millisecond, "PING"); err == nil {
		t.Fatalf("a paused node %s answered PING", r)
	}
	c.Resume(r)
	if got := rdo(t, r, "PING"); got != "PONG" {
		t.Fatalf("PING after Resume = %v", got)
	}
}

func TestKillFailsTheMasterOverToItsReplica(t *testing.T) {
	c := NewCluster(t)
	key := "sk:{p1}:stock"
	m := c.MasterOf(key)
	r := c.ReplicaOf(m)
	setAndWait(t, m, key, "100")

	c.Kill(m)
	if _, err := call(m, time.Second, "PING"); err == nil {
		t.Fatalf("killed node %s answered", m)
	}
	got := c.AwaitMaster(key, m, 30*time.Second)
	if got != r {
		t.Fatalf("AwaitMaster = %s, want the replica %s", got, r)
	}
	if mo := c.MasterOf(key); mo != r {
		t.Fatalf("MasterOf after the failover = %s, want %s", mo, r)
	}
	for _, a := range c.running() {
		if st := infoField(rdo(t, a, "CLUSTER", "INFO").(string), "cluster_state"); st != "ok" {
			t.Fatalf("%s: cluster_state:%s after AwaitMaster", a, st)
		}
	}
	if v := rdo(t, r, "GET", key); v != "100" {
		t.Fatalf("GET %s on the new master = %v, want the replicated 100", key, v)
	}
}

// TestReviveRejoinsAsTheNewMastersReplica: a killed master restarted
// with its nodes.conf (and no data) rejoins as the member it was, becomes
// the replica of the node promoted in its place, and syncs from it; the
// cluster settles with every master replicated again.
func TestReviveRejoinsAsTheNewMastersReplica(t *testing.T) {
	c := NewCluster(t)
	key := "sk:{p1}:stock"
	m := c.MasterOf(key)
	setAndWait(t, m, key, "7")
	c.Kill(m)
	promoted := c.AwaitMaster(key, m, 30*time.Second)
	c.Revive(m)
	if err := c.Settled(30 * time.Second); err != nil {
		t.Fatalf("not settled after Revive: %v", err)
	}
	if got := c.ReplicaOf(promoted); got != m {
		t.Fatalf("the replica of %s is %s, want the revived %s", promoted, got, m)
	}
	if mo := c.MasterOf(key); mo != promoted {
		t.Fatalf("MasterOf after Revive = %s, want %s (a revived node takes nothing back)", mo, promoted)
	}
	if role := infoField(rdo(t, m, "INFO", "replication").(string), "role"); role != "slave" {
		t.Fatalf("the revived %s is a %s, want a replica", m, role)
	}
}

// TestLagFailoverLosesAcknowledgedWrites: a counter written before the
// failover (and replicated) survives it, increments acknowledged while the
// replica was frozen do not, and the key still exists on the new master.
func TestLagFailoverLosesAcknowledgedWrites(t *testing.T) {
	c := NewCluster(t)
	key := "sk:{p1}:counter"
	m := c.MasterOf(key)
	const before = 100
	rdo(t, m, "INCRBY", key, strconv.Itoa(before))

	// One writer increments the counter until the master dies, counting
	// what the master acknowledged.
	var acked atomic.Int64
	acked.Store(before)
	done := make(chan error, 1)
	go func() {
		rc, err := dialRESP(m, 2*time.Second)
		if err != nil {
			done <- err
			return
		}
		defer rc.Close()
		for {
			v, err := rc.do("INCR", key)
			if err != nil {
				done <- nil // the master is gone
				return
			}
			n, ok := v.(int64)
			if !ok {
				done <- errors.New("INCR answered no integer")
				return
			}
			acked.Store(n)
		}
	}()
	await.Until(t, 10*time.Second, "the writer's first increments", func() bool { return acked.Load() > before+10 })

	newMaster := c.LagFailover(key, 30*time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if newMaster == m {
		t.Fatalf("LagFailover left %s the master", m)
	}
	if _, err := call(m, time.Second, "PING"); err == nil {
		t.Fatalf("the old master %s still answers", m)
	}
	v, err := call(newMaster, 2*time.Second, "GET", key)
	if err != nil || v == nil {
		t.Fatalf("GET %s on the new master: %v %v: the key must still exist", key, v, err)
	}
	got, _ := strconv.ParseInt(v.(string), 10, 64)
	last := acked.Load()
	t.Logf("counter: %d before, %d acknowledged by the old master, %d on the new one", before, last, got)
	if got < before {
		t.Fatalf("the new master has %d, less than the %d replicated before the failover", got, before)
	}
	if got >= last {
		t.Fatalf("the new master has %d, the old one acknowledged %d: no write was lost", got, last)
	}
	if st := infoField(rdo(t, newMaster, "CLUSTER", "INFO").(string), "cluster_state"); st != "ok" {
		t.Fatalf("cluster_state:%s on the new master", st)
	}
}

func TestPersistentRestartsFromTheLastSave(t *testing.T) {
	s := NewPersistent(t)
	if got := configGet(t, s.Addr(), "save"); got != "" {
		t.Fatalf("CONFIG GET save = %q: a persistent server must save only when told", got)
	}
	runID := infoField(rdo(t, s.Addr(), "INFO", "server").(string), "run_id")
	rdo(t, s.Addr(), "SET", "stock", "10")
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	rdo(t, s.Addr(), "SET", "stock", "7")
	rdo(t, s.Addr(), "SET", "after", "x")

	s.Crash()
	if _, err := call(s.Addr(), time.Second, "PING"); err == nil {
		t.Fatal("PING answered after Crash")
	}
	s.Start()
	if got := rdo(t, s.Addr(), "GET", "stock"); got != "10" {
		t.Fatalf("GET stock after the restart = %v, want the saved 10", got)
	}
	if got := rdo(t, s.Addr(), "GET", "after"); got != nil {
		t.Fatalf("GET after = %v: a write after the last Save came back", got)
	}
	if id := infoField(rdo(t, s.Addr(), "INFO", "server").(string), "run_id"); id == runID || id == "" {
		t.Fatalf("run_id %q after the restart, was %q: a restarted server is a new process", id, runID)
	}
}

func TestSaveOnAPlainServerDoesNotComeBack(t *testing.T) {
	s := New(t)
	rdo(t, s.Addr(), "SET", "k", "v")
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if got := rdo(t, s.Addr(), "GET", "k"); got != nil {
		t.Fatalf("GET k = %v after a restart: a server without persistence starts empty", got)
	}
}
