package stock

import (
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"flashgate/internal/redistest"
)

// forwarder is a TCP relay to one node that counts the connections it
// relays.
type forwarder struct {
	ln    net.Listener
	conns atomic.Int64
}

func forward(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.conns.Add(1)
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return f
}

// TestTestDialMapReachesEveryNodeThroughItsProxy: with the test-only dial
// map, the cluster client reaches every node — the seeds and the nodes the
// cluster announces (the masters) — through the address mapped to it.
func TestTestDialMapReachesEveryNodeThroughItsProxy(t *testing.T) {
	c := redistest.NewCluster(t)
	m := map[string]string{}
	fw := map[string]*forwarder{}
	for _, a := range c.Addrs() {
		fw[a] = forward(t, a)
		m[a] = fw[a].ln.Addr().String()
	}
	s, err := Open(context.Background(), strings.Join(c.Addrs()[:1], ","), testOptions(Options{Timeout: 2 * time.Second, TestDialMap: m}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if errs := s.Unreachable(ctx); len(errs) > 0 {
		t.Fatalf("unreachable through the map: %v", errs)
	}
	nodes := s.c.Nodes()
	if len(nodes) < 3 {
		t.Fatalf("the client knows %d nodes, want the 3 masters at least", len(nodes))
	}
	for a := range nodes {
		if f, ok := fw[a]; !ok || f.conns.Load() == 0 {
			t.Errorf("node %s, known to the client, was never dialled through its mapped address", a)
		}
	}
}
