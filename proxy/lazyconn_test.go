package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"flashgate/upstream"
)

// TestShopperDeadlinesStillBound: the shoppers' connections set their
// deadlines lazily (lazyListener), yet after many keep-alive requests —
// when the write deadline is no longer moved on every answer — a client
// that starts a request and never finishes it is still cut off by
// listen.read_timeout, never before it, and an idle one by idle_timeout.
func TestShopperDeadlinesStillBound(t *testing.T) {
	const readTimeout, idleTimeout = 400 * time.Millisecond, 800 * time.Millisecond
	cfg := fmt.Sprintf(baseConfig, "1000000r/s", 1000000, startOrigin(t))
	cfg = strings.Replace(cfg, "listen:\n  addr: \"127.0.0.1:0\"\n",
		fmt.Sprintf("listen:\n  addr: \"127.0.0.1:0\"\n  read_timeout: %v\n  write_timeout: %v\n  idle_timeout: %v\n", readTimeout, readTimeout, idleTimeout), 1)
	e := startEdge(t, cfg)
	addr := strings.TrimPrefix(e.base, "http://")

	for _, tc := range []struct {
		name    string
		tail    string // sent after the full requests
		atLeast time.Duration
	}{
		{"request never finished", "GET /items/p1 HTTP/1.1\r\nHost: shop.example\r\nX-Slow: ", readTimeout},
		{"idle", "", idleTimeout},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		for i := range 50 {
			if _, err := io.WriteString(c, "GET /items/p1 HTTP/1.1\r\nHost: shop.example\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			line, err := br.ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
				t.Fatalf("%s: answer %d: %q %v", tc.name, i, line, err)
			}
			for line != "\r\n" { // the headers
				if line, err = br.ReadString('\n'); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := br.Discard(br.Buffered()); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		if _, err := io.WriteString(c, tc.tail); err != nil {
			t.Fatal(err)
		}
		// The edge closes the connection: EOF (or a reset), not our own
		// deadline, which only keeps a broken edge from hanging the test.
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, br)
		waited := time.Since(start)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%s: the edge kept the connection open for 10s", tc.name)
		}
		if waited < tc.atLeast {
			t.Errorf("%s: closed after %v, before its timeout %v", tc.name, waited, tc.atLeast)
		}
		c.Close()
	}
}

// TestLazyConnKeepsSocketMethods: the wrapper hides none of the TCP
// connection's methods the edge relies on — the event streams' raw
// non-blocking sends (syscall.Conn) and sendfile (io.ReaderFrom).
func TestLazyConnKeepsSocketMethods(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			io.Copy(io.Discard, c)
		}
	}()
	c, err := lazyListener{ln}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*upstream.YieldConn); !ok {
		t.Fatalf("accepted %T, want *upstream.YieldConn (lazy deadlines, a yield before the next request's read)", c)
	}
	if _, ok := c.(syscall.Conn); !ok {
		t.Error("no SyscallConn: event streams would lose their non-blocking sends")
	}
	if _, ok := c.(io.ReaderFrom); !ok {
		t.Error("no ReadFrom: sendfile would be lost")
	}
	if _, ok := c.(interface {
		SetNoDelay(bool) error
	}); !ok {
		t.Error("no SetNoDelay")
	}
}
