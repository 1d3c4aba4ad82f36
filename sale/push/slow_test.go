package push

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashgate/conf"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/stock"
)

// hiddenConn hides the socket's SyscallConn, as TLS and fasthttp's per-IP
// wrapper do: the hub must fall back to write deadlines.
type hiddenConn struct{ net.Conn }

// A client that stops reading is dropped on the next write without holding
// up the event of a healthy client in the same batch, whether the write is
// a non-blocking send or a deadline write.
func TestSlowClientIsDropped(t *testing.T) {
	r := redistest.New(t)
	d := conf.Defaults()
	for _, tc := range []struct {
		name string
		wrap func(net.Conn) net.Conn
	}{
		{"nonblocking", func(c net.Conn) net.Conn { return c }},
		{"deadline", func(c net.Conn) net.Conn { return hiddenConn{c} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := stocktest.Open(t, r.Addr(), stocktest.Timeout(d.Redis.Timeout))
			ev := d.Events
			ev.WriteTimeout = 20 * time.Millisecond
			h, err := New(st, Config{EventsConfig: ev, KeepHijackedConns: true,
				Render: func(b []byte, o stock.OrderInfo) []byte {
					return append(append(append(b, `{"status":"`...), o.State...), `"}`...)
				}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			h.Start(ctx)
			defer h.Close()

			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			// attach parks a server-side connection in a stream, as the
			// hijack does, and returns the client side.
			attach := func(id int64, user string) (*Stream, net.Conn) {
				s, rej := h.Open([]byte("p1"), id, []byte(user))
				if rej != nil {
					t.Fatal(rej)
				}
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				sc, err := ln.Accept()
				if err != nil {
					t.Fatal(err)
				}
				if s.attach(tc.wrap(sc)) != nil {
					t.Fatal("attach waits with KeepHijackedConns")
				}
				return s, c
			}
			base := time.Now().UnixNano() >> 8
			slowID, okID := base, base+1
			slow, slowClient := attach(slowID, "slow")
			_, okClient := attach(okID, "ok")
			slowClient.(*net.TCPConn).SetReadBuffer(4096)

			// Fill the slow client's socket as unread heartbeats would.
			slow.mu.Lock()
			junk := []byte(":" + strings.Repeat("x", 16<<10) + "\n")
			filled := false
			for range 10_000 {
				if err := h.send(slow, junk); errors.Is(err, errSlow) {
					filled = true
					break
				} else if err != nil {
					t.Fatal(err)
				}
			}
			slow.mu.Unlock()
			if !filled {
				t.Fatal("could not fill the slow client's socket")
			}
			// The sends that failed may have left part of a write behind;
			// a fresh stream state for the test is what matters.

			start := time.Now()
			if err := st.PublishStored(ctx, map[string][]int64{"p1": {slowID, okID}}); err != nil {
				t.Fatal(err)
			}
			okClient.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(okClient)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(line, `"status":"success"`) {
					break
				}
			}
			took := time.Since(start)
			deadline := time.Now().Add(5 * time.Second)
			for h.Stats().Open != 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			stats := h.Stats()
			if stats.DropsSlow != 1 || stats.Pushes != 1 || stats.Open != 0 {
				t.Fatalf("stats %+v", stats)
			}
			t.Logf("healthy client got its outcome %v after the publish; the slow one was dropped", took.Round(time.Microsecond))
			if took > time.Second {
				t.Fatalf("healthy client waited %v", took)
			}
		})
	}
}

// peerClosed tells a closed page from an idle one, even behind bytes the
// client sent.
func TestPeerClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	rc := rawConnOf(sc)
	if rc == nil {
		t.Skip("no non-blocking access on this platform")
	}
	if peerClosed(rc) {
		t.Fatal("an idle client reads as closed")
	}
	c.Write([]byte("x" + strconv.Itoa(1)))
	if peerClosed(rc) {
		t.Fatal("a client that sent bytes reads as closed")
	}
	c.Close()
	// The FIN is in the server's socket once Close returns on loopback.
	if !peerClosed(rc) {
		t.Fatal("a closed client reads as open")
	}
}
