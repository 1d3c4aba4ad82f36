package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashgate/internal/redistest"
	"flashgate/orders/stock"
)

// TestPartialStockIsNotSoldOut: an attempt for more units than are left is
// refused (410), but the units that are left are still for sale: neither
// this edge nor the others may flag the product sold out.
func TestPartialStockIsNotSoldOut(t *testing.T) {
	r := redistest.New(t)
	rd := openRedis(t, r.Addr())
	acts := activities(sale("pq", 3, 5))
	// Long refresh intervals: the refresh loop repairs a wrong flag after
	// a while; the shoppers in between must not be turned away.
	a := startEdge(t, r.Addr(), acts, "sale: {refresh_interval: 1m}")
	b := startEdge(t, r.Addr(), acts, "sale: {refresh_interval: 1m}")
	j := newJWTs(t, sessionSecret)
	sub := subscribe(t, r.Addr(), stock.SoldOutChannel)

	if res, err := a.attempt(j.get("first"), "pq", 2); err != nil || res.status != 200 {
		t.Fatalf("2 of 3 units: %v %v", res, err)
	}
	if res, err := a.attempt(j.get("greedy"), "pq", 3); err != nil || res.status != 410 {
		t.Fatalf("3 units with 1 left: %v %v, want 410", res, err)
	}
	if s := rd.stock("pq"); s != 1 {
		t.Fatalf("Redis stock %d, want 1", s)
	}
	if st, rem := a.status("pq"); st != "active" {
		t.Errorf("edge A: status %q (remaining %d) with 1 unit left, want active", st, rem)
	}
	// A sold-out broadcast, if one is sent, follows the 410 within
	// milliseconds; a second is far beyond that.
	if msg, ok := sub.next(time.Second); ok && msg == "1pq" {
		t.Errorf("edge A broadcast %q (sold out) with 1 unit left", msg)
		if waitFor(time.Second, func() bool { st, _ := b.status("pq"); return st == "soldout" }) {
			t.Errorf("edge B: status soldout with 1 unit left (from the broadcast)")
		}
	}
	if res, err := a.attempt(j.get("modest"), "pq", 1); err != nil || res.status != 200 {
		t.Errorf("the last unit on edge A: %v %v, want 200", res, err)
	}
	if s := rd.stock("pq"); s != 0 {
		t.Errorf("Redis stock %d, want 0", s)
	}
}

// subscriber is a raw RESP connection subscribed to one channel.
type subscriber struct {
	c  net.Conn
	br *bufio.Reader
}

// subscribe returns once Redis confirmed the subscription, so nothing
// published afterwards is missed.
func subscribe(t *testing.T, addr, channel string) *subscriber {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n", len(channel), channel)
	s := &subscriber{c: c, br: bufio.NewReader(c)}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if v, err := s.array(); err != nil || len(v) != 3 || v[0] != "subscribe" {
		t.Fatalf("SUBSCRIBE %s: %q %v", channel, v, err)
	}
	return s
}

// next waits up to d for a message and returns its payload.
func (s *subscriber) next(d time.Duration) (string, bool) {
	s.c.SetReadDeadline(time.Now().Add(d))
	v, err := s.array()
	if err != nil || len(v) != 3 || v[0] != "message" {
		return "", false
	}
	return v[2], true
}

// array reads one RESP2 array of bulk strings and integers.
func (s *subscriber) array() ([]string, error) {
	line, err := s.br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	out := make([]string, 0, n)
	for range n {
		line, err := s.br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		switch line[0] {
		case ':':
			out = append(out, strings.TrimSpace(line[1:]))
		case '$':
			size, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
			buf := make([]byte, size+2)
			if _, err := io.ReadFull(s.br, buf); err != nil {
				return nil, err
			}
			out = append(out, string(buf[:size]))
		default:
			return nil, fmt.Errorf("unexpected %q", line)
		}
	}
	return out, nil
}
