package broker

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestFlightsQuiesceWaitsForEarlierWork(t *testing.T) {
	f := NewFlights()
	early := f.Enter()
	done := make(chan error, 1)
	go func() { done <- f.Quiesce(context.Background()) }()
	// Work that starts after Quiesce was called does not hold it up: wait
	// until Quiesce has started a new generation, then enter.
	for f.cur.Load() == early.g {
		runtime.Gosched()
	}
	late := f.Enter()
	select {
	case err := <-done:
		t.Fatalf("Quiesce returned %v while earlier work was in flight", err)
	default:
	}
	early.Leave()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	late.Leave()
	if err := f.Quiesce(context.Background()); err != nil {
		t.Fatalf("quiesce with nothing in flight: %v", err)
	}
}

func TestFlightsQuiesceHonoursContext(t *testing.T) {
	f := NewFlights()
	fl := f.Enter()
	defer fl.Leave()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := f.Quiesce(ctx); err == nil {
		t.Fatal("Quiesce returned nil while work was in flight")
	}
}

// Under concurrent Enter/Leave and Quiesce, every Quiesce returns and no
// count goes negative.
func TestFlightsConcurrent(t *testing.T) {
	f := NewFlights()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					f.Enter().Leave()
				}
			}
		}()
	}
	for range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := f.Quiesce(ctx); err != nil {
			t.Fatalf("Quiesce: %v", err)
		}
		cancel()
	}
	close(stop)
	wg.Wait()
	if n := f.cur.Load().n.Load(); n != 0 {
		t.Fatalf("count %d after everything left", n)
	}
}

func TestFlightsEnterLeaveAllocs(t *testing.T) {
	f := NewFlights()
	if n := testing.AllocsPerRun(1000, func() { f.Enter().Leave() }); n != 0 {
		t.Fatalf("Enter/Leave allocates %v", n)
	}
}
