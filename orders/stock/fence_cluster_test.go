package stock

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// redis.wait_replicas: every script call is followed by a WAIT on its
// master; a replica that cannot acknowledge makes the WAIT time out, which
// is counted, and the purchase is still answered.
func TestWaitReplicasOnCluster(t *testing.T) {
	s, c := openCluster(t, Options{Timeout: 2 * time.Second, WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	warm(t, s, "wr", 10, 5)
	if out := mustDeduct(t, s, attempt("wr", "alice", 1, 5)); out.Code != OK || out.Remaining != 9 {
		t.Fatalf("first purchase %+v", out)
	}
	if waits, short := s.WaitStats(); waits != 1 || short != 0 {
		t.Fatalf("WaitStats = %d, %d; want 1, 0", waits, short)
	}
	master := c.MasterOf(StockKey("wr"))
	replica := c.ReplicaOf(master)
	c.Pause(replica)
	t0 := time.Now()
	out := mustDeduct(t, s, attempt("wr", "bob", 1, 5))
	took := time.Since(t0)
	c.Resume(replica)
	if out.Code != OK || out.Remaining != 8 {
		t.Fatalf("purchase with the replica paused %+v", out)
	}
	if waits, short := s.WaitStats(); waits != 2 || short != 1 {
		t.Fatalf("WaitStats = %d, %d; want 2, 1", waits, short)
	}
	if took < 100*time.Millisecond {
		t.Fatalf("the purchase was answered after %v, before the WAIT's timeout", took)
	}
}

// A failover onto a replica that lags: the promoted replica holds an older
// stock for a key that still exists. The first deduction on it fences the
// sale instead of selling from it.
func TestLaggingFailoverFencesOnCluster(t *testing.T) {
	s, c := openCluster(t, Options{Timeout: 2 * time.Second})
	ctx := context.Background()
	warm(t, s, "lf", 1000, 1)
	for i := range 20 {
		mustDeduct(t, s, attempt("lf", "early"+string(rune('a'+i)), 1, 1))
	}
	master := c.MasterOf(StockKey("lf"))
	done := make(chan string, 1)
	go func() { done <- c.LagFailover(StockKey("lf"), 30*time.Second) }()
	// Sold on the master while its replica is frozen: lost by the failover.
	sold := 0
	for len(done) == 0 && sold < 200 {
		out, err := s.Deduct(ctx, attempt("lf", "late"+time.Now().Format("150405.000000"), 1, 1))
		if err == nil && out.Code == OK {
			sold++
		}
		time.Sleep(2 * time.Millisecond)
	}
	promoted := <-done
	if promoted == master {
		t.Fatal("no failover")
	}
	var out Outcome
	deadline := time.Now().Add(20 * time.Second)
	for {
		o, err := s.Deduct(ctx, attempt("lf", "after", 1, 1))
		if err == nil {
			out = o
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer from the promoted replica: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out.Code != Recovering {
		t.Fatalf("first deduction on the promoted replica (after %d sold on the old master) = %v, want RECOVERING", sold, out.Code)
	}
	info, ok, err := s.SaleInfo(ctx, "lf")
	if err != nil || !ok || info.Fence == "" {
		t.Fatalf("SaleInfo after the failover = %+v %v %v", info, ok, err)
	}
	t.Logf("%d sold on the old master during the lag; the promoted replica says %d left and fenced %q", sold, info.Remaining, info.Fence)
}

// Open after a failover with the seed list an operator's config still has:
// the dead master is in it, and Open must not fail on whichever node a
// keyless PING would have hit.
func TestOpenWithADeadSeed(t *testing.T) {
	s, c := openCluster(t, Options{Timeout: 2 * time.Second})
	warm(t, s, "ds", 10, 1)
	master := c.MasterOf(StockKey("ds"))
	c.Kill(master)
	c.AwaitMaster(StockKey("ds"), master, 30*time.Second)
	for i := range 20 {
		s2, err := Open(context.Background(), strings.Join(c.Addrs(), ","), testOptions(Options{Timeout: 2 * time.Second}))
		if err != nil {
			t.Fatalf("Open %d with a dead seed: %v", i, err)
		}
		s2.Close()
	}
}

// BenchmarkDeductWait: what redis.wait_replicas costs a purchase on a
// 3+3 cluster on loopback, one script call per attempt (sequential) and
// under group commit (parallel). Compare wait=0 with wait=1 in one run.
func BenchmarkDeductWait(b *testing.B) {
	for _, wait := range []int{0, 1} {
		s, _ := openCluster(b, Options{Timeout: 2 * time.Second, WaitReplicas: wait, WaitTimeout: 100 * time.Millisecond})
		warm(b, s, "bw", 1<<40, 1<<30)
		for _, mode := range []string{"sequential", "parallel"} {
			b.Run(fmt.Sprintf("wait=%d/%s", wait, mode), func(b *testing.B) {
				run := func() {
					if _, err := s.Deduct(context.Background(), attempt("bw", "u", 1, 1<<30)); err != nil {
						b.Fatal(err)
					}
				}
				if mode == "sequential" {
					for b.Loop() {
						run()
					}
					return
				}
				b.SetParallelism(32)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						run()
					}
				})
			})
		}
		calls, attempts := s.Stats()
		waits, short := s.WaitStats()
		b.Logf("wait=%d: %d script calls for %d attempts, %d WAITs (%d short)", wait, calls, attempts, waits, short)
	}
}
