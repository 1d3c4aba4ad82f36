package upstream

import (
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
