package push

import (
	"errors"
	"net"
	"sync"
	"syscall"

	"github.com/valyala/fasthttp"

	"flashgate/orders/order"
	"flashgate/orders/stock"
)

// state is an order state as the shopper sees it; a stream's state only
// moves from pending to one of the others.
type state uint8

const (
	statePending state = iota
	stateSuccess
	stateReleased
	stateFailed
	statePaid
	stateExpired
)

var stateNames = [...]string{stock.StatePending, stock.StateSuccess, stock.StateReleased, stock.StateFailed, stock.StatePaid, stock.StateExpired}

// parseState maps a Redis order state; anything unknown is pending (it
// may still change, and the deadline ends the wait anyway).
func parseState(s string) state {
	switch s {
	case stock.StateSuccess:
		return stateSuccess
	case stock.StateReleased:
		return stateReleased
	case stock.StateFailed:
		return stateFailed
	case stock.StatePaid:
		return statePaid
	case stock.StateExpired:
		return stateExpired
	}
	return statePending
}

type phase uint8

const (
	phaseOpening phase = iota // registered, the order is being read
	phaseLive                 // headers sent, waiting
	phaseClosed
)

// errGone marks a client found closed by a probe.
var errGone = errors.New("push: client has gone")

// The response head, written by the hub after the hijack. The body is
// delimited by the connection's end, which is how a stream ends anyway.
// X-Accel-Buffering: nginx in front must not buffer the stream.
var sseHead = []byte("HTTP/1.1 200 OK\r\n" +
	"Content-Type: text/event-stream\r\n" +
	"Cache-Control: no-store\r\n" +
	"Connection: close\r\n" +
	"X-Accel-Buffering: no\r\n" +
	"\r\n")

// heartbeatLine is an SSE comment: browsers ignore it, proxies see traffic.
var heartbeatLine = []byte(":\n")

var (
	contentSSE = []byte("text/event-stream")
	bufs       = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}
)

// Stream is one shopper waiting for one order. It is small on purpose: it
// is all an edge keeps per waiting shopper once the connection is parked.
type Stream struct {
	h       *Hub
	product string // interned
	user    string
	order   int64
	endAt   int64   // unix ns; set by Open, never changed
	next    *Stream // same order id; guarded by the shard's mutex

	mu      sync.Mutex
	phase   phase
	state   state
	qty     int32
	price   int64
	created int64
	payBy   int64 // the pay deadline, unix ms (0: none)
	beatAt  int64
	conn    net.Conn
	rc      syscall.RawConn // non-blocking access to conn, when it has one
	done    chan struct{}   // closed on close when the hijack handler waits
}

// Serve answers the request with the stream: the order's current state at
// once, then its outcome when it is decided. o is the order as just read
// (it must be the shopper's own). An order already decided is answered as
// one event without holding anything; otherwise the connection is hijacked
// and parked in the hub after the handler returns. The caller must not use
// s afterwards.
func (s *Stream) Serve(ctx *fasthttp.RequestCtx, o stock.OrderInfo) {
	s.mu.Lock()
	s.qty, s.price, s.created, s.payBy = int32(o.Qty), o.PriceCents, o.CreatedMs, o.PayByMs
	if s.state == statePending {
		// Unless a message decided it while the order was being read.
		s.state = parseState(o.State)
	}
	decided := s.state != statePending
	s.mu.Unlock()
	if decided {
		bp := bufs.Get().(*[]byte)
		b := s.appendEvent((*bp)[:0])
		s.Abort()
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.Response.Header.SetContentTypeBytes(contentSSE)
		ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
		ctx.SetBody(b) // copies
		*bp = b
		bufs.Put(bp)
		return
	}
	// The order is real (the caller read it): its product's outcomes are
	// worth following.
	s.h.follow(s.product)
	ctx.SetStatusCode(fasthttp.StatusOK) // what the access log and metrics see
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(s.hijacked)
}

// Abort gives up a stream that was opened but will not be served (the
// order is unknown or someone else's, or Redis failed).
func (s *Stream) Abort() {
	s.mu.Lock()
	if s.phase != phaseOpening {
		s.mu.Unlock()
		return
	}
	s.closeLocked()
	s.mu.Unlock()
	s.h.unregister(s)
}

// hijacked runs on fasthttp's hijack goroutine with the connection. With
// KeepHijackedConns it returns at once and the connection lives on in the
// hub; without, fasthttp would close it on return, so it waits.
func (s *Stream) hijacked(c net.Conn) {
	// The bare connection: fasthttp's wrapper holds the read buffer, which
	// a stream never needs (it reads nothing from the client).
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
		c = u.UnsafeConn()
	}
	if done := s.attach(c); done != nil {
		<-done
	}
}

// attach sends the head and the current state, and parks the stream.
func (s *Stream) attach(c net.Conn) (wait <-chan struct{}) {
	h := s.h
	s.mu.Lock()
	if s.phase != phaseOpening {
		// Closed meanwhile (hub shutdown, or the deadline of a stream whose
		// hijack came very late).
		s.mu.Unlock()
		c.Close()
		return nil
	}
	s.conn, s.rc = c, rawConnOf(c)
	bp := bufs.Get().(*[]byte)
	b := append((*bp)[:0], sseHead...)
	b = s.appendEvent(b)
	err := h.send(s, b)
	*bp = b
	bufs.Put(bp)
	if err != nil || s.state != statePending {
		s.closeLocked()
		s.mu.Unlock()
		if err != nil {
			h.countDrop(err)
		} else {
			h.pushes.Inc() // decided between Serve and the hijack
		}
		h.unregister(s)
		return nil
	}
	s.phase = phaseLive
	s.beatAt = h.now() + int64(h.cfg.Heartbeat)
	if !h.cfg.KeepHijackedConns {
		s.done = make(chan struct{})
		wait = s.done
	}
	s.mu.Unlock()
	return wait
}

// deliver moves the stream to a decided state: a live stream gets the
// event and is closed; an opening one sends it when it attaches. b is a
// scratch buffer, returned for reuse.
func (s *Stream) deliver(st state, b []byte) []byte {
	if st == statePending {
		return b
	}
	s.mu.Lock()
	if s.phase == phaseClosed || s.state != statePending {
		s.mu.Unlock()
		return b
	}
	s.state = st
	if s.phase == phaseOpening {
		s.mu.Unlock()
		return b
	}
	b = s.appendEvent(b[:0])
	err := s.h.send(s, b)
	s.closeLocked()
	s.mu.Unlock()
	if err != nil {
		s.h.countDrop(err)
	} else {
		s.h.pushes.Inc()
	}
	s.h.unregister(s)
	return b
}

// heartbeat sends a comment if one is due, dropping a client that has
// gone or does not read.
func (s *Stream) heartbeat(now int64, b []byte) []byte {
	s.mu.Lock()
	if s.phase != phaseLive || now < s.beatAt {
		s.mu.Unlock()
		return b
	}
	var err error
	if s.rc != nil && peerClosed(s.rc) {
		err = errGone
	} else {
		err = s.h.send(s, heartbeatLine)
	}
	if err == nil {
		s.beatAt = now + int64(s.h.cfg.Heartbeat)
		s.mu.Unlock()
		return b
	}
	s.closeLocked()
	s.mu.Unlock()
	s.h.countDrop(err)
	s.h.unregister(s)
	return b
}

// expire ends a stream at its deadline with the state just read (st) or,
// if that is still pending, the last one it knew.
func (s *Stream) expire(st state, b []byte) []byte {
	s.mu.Lock()
	switch s.phase {
	case phaseClosed:
		s.mu.Unlock()
		return b
	case phaseOpening:
		// The hijack never came: the connection failed before fasthttp
		// handed it over. Nothing to write to.
		s.closeLocked()
		s.mu.Unlock()
		s.h.unregister(s)
		return b
	}
	if s.state == statePending {
		s.state = st
	}
	b = s.appendEvent(b[:0])
	err := s.h.send(s, b)
	decided := s.state != statePending
	s.closeLocked()
	s.mu.Unlock()
	switch {
	case err != nil:
		s.h.countDrop(err)
	case decided:
		s.h.pushes.Inc()
	default:
		s.h.deadlines.Inc()
	}
	s.h.unregister(s)
	return b
}

// gone reports whether a live stream's client has closed its side.
func (s *Stream) gone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.phase == phaseLive && s.rc != nil && peerClosed(s.rc)
}

// drop closes the stream without a last word (the client is gone).
func (s *Stream) drop(why error) {
	if s.end() {
		s.h.countDrop(why)
	}
}

// shutdown closes the stream when the hub closes: not a drop.
func (s *Stream) shutdown() { s.end() }

// end closes the stream and removes it from the hub; false when it was
// closed already.
func (s *Stream) end() bool {
	s.mu.Lock()
	if s.phase == phaseClosed {
		s.mu.Unlock()
		return false
	}
	s.closeLocked()
	s.mu.Unlock()
	s.h.unregister(s)
	return true
}

// closeLocked ends the stream; the caller counts why, then unregisters it
// after unlocking (the tables' locks are never taken under a stream's).
// Counting first: whoever sees the open count drop sees the counters too.
func (s *Stream) closeLocked() {
	s.phase = phaseClosed
	if s.conn != nil {
		s.conn.Close()
		s.conn, s.rc = nil, nil
	}
	if s.done != nil {
		close(s.done)
		s.done = nil
	}
}

// appendEvent renders `data: <json>\n\n` for the current state.
func (s *Stream) appendEvent(b []byte) []byte {
	b = append(b, "data: "...)
	b = s.h.cfg.Render(b, stock.OrderInfo{Order: order.Order{
		ID: s.order, ProductID: s.product, UserID: s.user, Qty: int(s.qty), PriceCents: s.price, CreatedMs: s.created, PayByMs: s.payBy,
	}, State: stateNames[s.state]})
	return append(b, "\n\n"...)
}
