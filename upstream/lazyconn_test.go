package upstream

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestLazyConnServerCycleAllocs: a keep-alive request's deadline calls as
// fasthttp's server makes them (idle wait, the request's read, read and
// write deadlines) allocate nothing through LazyConn, and on a busy
// connection leave the socket's deadlines as they were: the read deadline
// asked once the request is in never reaches it, the idle one is kept.
func TestLazyConnServerCycleAllocs(t *testing.T) {
	client, s := tcpPair(t)
	c := NewLazyConn(s).(*LazyConn)
	req, buf := []byte("r"), make([]byte, 1)
	cycle := func() {
		if _, err := client.Write(req); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	}
	start := time.Now()
	cycle()
	onSocket, slack := c.read.at, c.read.slack
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Errorf("%v allocations per request", n)
	}
	// Requests within the idle deadline's slack (100 ms) of the first
	// leave the first request's idle deadline on the socket. (A machine
	// that took longer for 101 loopback round trips moves it, rightly.)
	if took := time.Since(start); took >= slack {
		t.Logf("the requests took %v, past the slack %v: not checked", took, slack)
	} else if c.read.at != onSocket {
		t.Errorf("read deadline on the socket moved from %v to %v", onSocket, c.read.at)
	}
	if !c.readPending {
		t.Error("the read deadline asked after the read is not pending")
	}
}

// TestYieldConnReadAfterWriteYields: the first Read after a Write lets the
// runnable goroutines run before it reads (the peer's reply to what was
// written gets time to arrive: no EAGAIN read and park), a Read after a
// Read does not yield, and neither allocates.
func TestYieldConnReadAfterWriteYields(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	client, s := tcpPair(t)
	c := NewYieldConn(s).(*YieldConn)
	one, buf := []byte("x"), make([]byte, 1)
	// othersFirst: with a byte already in (a loopback write has delivered
	// it when it returns), does a goroutine made runnable just before the
	// Read run before the Read returns?
	othersFirst := func() bool {
		if _, err := client.Write(one); err != nil {
			t.Fatal(err)
		}
		var ran atomic.Bool
		done := make(chan struct{})
		go func() { ran.Store(true); close(done) }()
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
		first := ran.Load()
		<-done
		return first
	}
	if _, err := c.Write(one); err != nil {
		t.Fatal(err)
	}
	if !othersFirst() {
		t.Error("the Read after a Write did not yield")
	}
	if othersFirst() {
		t.Error("a Read after a Read yielded")
	}
	if n := testing.AllocsPerRun(100, func() {
		c.Write(one)
		client.Write(one)
		c.Read(buf)
	}); n != 0 {
		t.Errorf("%v allocations per write and read", n)
	}
}
