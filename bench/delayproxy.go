package main

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// DelayProxy is the fault scenario's TCP proxy between the edge and Redis
// (or the origin): every chunk read from one side is written to the other
// Latency (+ a uniform Jitter) later, in order, and every StallEvery all
// traffic is held for StallFor, so that calls in flight outlast the edge's
// timeouts. Connections stay open through a stall: the answers arrive
// late, as from a Redis busy with a slow command or a network hiccup.
type DelayProxy struct {
	Name   string
	ln     net.Listener
	target string
	f      Fault

	stallUntil atomic.Int64 // unix ns
	// extra latency and jitter (ns) on top of f, set while it runs (the
	// nemesis' link faults): SetDelay.
	extra, extraJitter atomic.Int64
	stalls             atomic.Int64
	chunks             atomic.Int64
	conns              atomic.Int64
	stop               chan struct{}
	wg                 sync.WaitGroup
	mu                 sync.Mutex
	open               map[net.Conn]struct{}
}

func startDelayProxy(name, target string, f Fault) (*DelayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &DelayProxy{Name: name, ln: ln, target: target, f: f, stop: make(chan struct{}), open: map[net.Conn]struct{}{}}
	d.wg.Add(1)
	go d.accept()
	if f.StallEvery > 0 {
		d.wg.Add(1)
		go d.staller()
	}
	return d, nil
}

// SetDelay adds latency plus a uniform jitter to every chunk from now on
// (0, 0: back to the proxy's own Fault).
func (d *DelayProxy) SetDelay(latency, jitter time.Duration) {
	d.extra.Store(int64(latency))
	d.extraJitter.Store(int64(jitter))
}

// Hold holds all traffic, both ways, until t: connections stay open and
// nothing passes (a black hole, as a link that drops every packet while
// TCP keeps retransmitting); what was sent meanwhile arrives after t.
func (d *DelayProxy) Hold(t time.Time) {
	d.stallUntil.Store(t.UnixNano())
	d.stalls.Add(1)
}

// Addr is where the edge connects instead of the target.
func (d *DelayProxy) Addr() string { return d.ln.Addr().String() }

func (d *DelayProxy) Close() {
	select {
	case <-d.stop:
		return
	default:
	}
	close(d.stop)
	d.ln.Close()
	d.mu.Lock()
	for c := range d.open {
		c.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

func (d *DelayProxy) track(c net.Conn, add bool) {
	d.mu.Lock()
	if add {
		d.open[c] = struct{}{}
	} else {
		delete(d.open, c)
	}
	d.mu.Unlock()
}

func (d *DelayProxy) staller() {
	defer d.wg.Done()
	t := time.NewTicker(d.f.StallEvery)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case now := <-t.C:
			d.stallUntil.Store(now.Add(d.f.StallFor).UnixNano())
			d.stalls.Add(1)
		}
	}
}

func (d *DelayProxy) accept() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.conns.Add(1)
		d.wg.Add(1)
		go d.serve(c)
	}
}

func (d *DelayProxy) serve(c net.Conn) {
	defer d.wg.Done()
	up, err := net.DialTimeout("tcp", d.target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	d.track(c, true)
	d.track(up, true)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.pipe(c, up) }()
	go func() { defer wg.Done(); d.pipe(up, c) }()
	wg.Wait()
	d.track(c, false)
	d.track(up, false)
}

type chunk struct {
	b   []byte
	due int64
}

// pipe copies src to dst, each chunk held until its due time.
func (d *DelayProxy) pipe(src, dst net.Conn) {
	q := make(chan chunk, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ck := range q {
			d.wait(ck.due)
			if _, err := dst.Write(ck.b); err != nil {
				for range q {
				}
				return
			}
		}
	}()
	var last int64
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			due := time.Now().Add(d.f.Latency).UnixNano() + d.extra.Load()
			if d.f.Jitter > 0 {
				due += rand.Int64N(int64(d.f.Jitter))
			}
			if j := d.extraJitter.Load(); j > 0 {
				due += rand.Int64N(j)
			}
			due = max(due, last) // never reorder
			last = due
			d.chunks.Add(1)
			q <- chunk{buf[:n], due}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
	// Half-close so the other direction drains, then both end.
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	} else {
		dst.Close()
	}
	src.Close()
}

// wait sleeps until due and until no stall is in force.
func (d *DelayProxy) wait(due int64) {
	for {
		now := time.Now().UnixNano()
		t := due
		if su := d.stallUntil.Load(); su > now && su > t {
			t = su
		}
		if t <= now {
			return
		}
		select {
		case <-d.stop:
			return
		case <-time.After(time.Duration(t - now)):
		}
	}
}
