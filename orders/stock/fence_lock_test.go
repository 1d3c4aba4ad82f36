package stock

import (
	"context"
	"testing"
	"time"
)

// TestRecoveryLockLease: the rebuild lock is a lease only its owner renews
// or releases; another owner can take it only once it is released or lapsed.
func TestRecoveryLockLease(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	const p, lease = "lk1", time.Minute
	if got, err := s.LockRecovery(ctx, p, "1|f", lease); err != nil || !got {
		t.Fatalf("first lock: %v %v", got, err)
	}
	if got, err := s.LockRecovery(ctx, p, "2|f", lease); err != nil || got {
		t.Fatalf("a second owner took a held lock: %v %v", got, err)
	}
	if held, err := s.RenewRecovery(ctx, p, "2|f", lease); err != nil || held {
		t.Fatalf("another owner renewed the lock: %v %v", held, err)
	}
	if held, err := s.RenewRecovery(ctx, p, "1|f", 20*time.Millisecond); err != nil || !held {
		t.Fatalf("the owner could not renew its lock: %v %v", held, err)
	}
	// Renewed to a short lease: it lapses, and the other owner takes it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := s.LockRecovery(ctx, p, "2|f", lease)
		if err != nil {
			t.Fatal(err)
		}
		if got {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a lock renewed to 20ms never lapsed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if held, err := s.RenewRecovery(ctx, p, "1|f", lease); err != nil || held {
		t.Fatalf("the lapsed owner renewed a lock another took: %v %v", held, err)
	}
	if err := s.UnlockRecovery(ctx, p, "1|f"); err != nil {
		t.Fatal(err)
	}
	if held, err := s.RenewRecovery(ctx, p, "2|f", lease); err != nil || !held {
		t.Fatalf("the lapsed owner's unlock released the new owner's lock: %v %v", held, err)
	}
}
