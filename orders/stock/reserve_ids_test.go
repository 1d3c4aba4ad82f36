package stock

import (
	"context"
	"testing"
)

// ReserveIDs keeps a node's reservation ahead of its ids, starts a new
// process's ids after its predecessor's reservation (or, when an earlier
// version left none, after its last heartbeat + the fallback, or its exit
// mark), shrinks it at a graceful exit, and keeps nodes apart.
func TestReserveIDs(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	const now = 1_800_000_000_000

	// A node that never ran: the first process starts where its clock is.
	before, res, err := s.ReserveIDs(ctx, 7, now, 5000, IDsFirst, 3000)
	if err != nil || before != 3000 || res != now+5000 {
		t.Fatalf("first call on a new node: %d, %d, %v; want 3000 (no beat + the fallback), %d", before, res, err, now+5000)
	}
	// Renewals follow the ids; a renewal behind the reservation keeps it.
	if before, res, err = s.ReserveIDs(ctx, 7, now+1000, 5000, IDsRenew, 0); err != nil || before != now+5000 || res != now+6000 {
		t.Fatalf("renewal: %d, %d, %v; want %d, %d", before, res, err, now+5000, now+6000)
	}
	if _, res, _ = s.ReserveIDs(ctx, 7, now, 5000, IDsRenew, 0); res != now+6000 {
		t.Fatalf("a renewal behind lowered the reservation to %d", res)
	}
	// Killed now; the next process's clock is 2 s behind: its ids start
	// after the reservation, and it reserves past them.
	before, res, _ = s.ReserveIDs(ctx, 7, now-2000, 5000, IDsFirst, 3000)
	if before != now+6000 || res != now+6001+5000 {
		t.Fatalf("first call after a crash: %d, %d; want %d, %d", before, res, now+6000, now+6001+5000)
	}
	// A graceful exit shrinks it to the last id (or the exit mark).
	if err := s.EdgeStopped(ctx, 7, now+7500); err != nil {
		t.Fatal(err)
	}
	if _, res, _ = s.ReserveIDs(ctx, 7, now+7000, 0, IDsExit, 0); res != now+7500 {
		t.Fatalf("exit: reservation %d, want the exit mark %d", res, now+7500)
	}
	if before, _, _ = s.ReserveIDs(ctx, 7, now, 5000, IDsFirst, 3000); before != now+7500 {
		t.Fatalf("first call after a graceful exit: before %d, want %d", before, now+7500)
	}

	// An earlier version's edge: a heartbeat and no reservation.
	if err := s.Heartbeat(ctx, 8, now, now-60_000); err != nil {
		t.Fatal(err)
	}
	if before, res, _ = s.ReserveIDs(ctx, 8, now-2000, 5000, IDsFirst, 3000); before != now+3000 || res != now+3001+5000 {
		t.Fatalf("first call after an earlier version: %d, %d; want %d, %d", before, res, now+3000, now+3001+5000)
	}
	// The heartbeat readers skip the reservations.
	live, err := s.LiveEdges(ctx, now-1)
	if err != nil || len(live) != 1 || live[0] != 8 {
		t.Fatalf("LiveEdges = %v, %v; want [8]", live, err)
	}
}
