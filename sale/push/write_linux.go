//go:build linux

package push

import (
	"net"
	"sync"
	"syscall"
)

// rawConnOf gives access to the socket when a write can be tried without
// waiting (plain TCP), nil otherwise (TLS, wrappers): those use deadlines.
func rawConnOf(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// sysOp carries one system call's arguments and results through
// RawConn.Write/Read, whose callback would otherwise be a closure allocated
// per call. Pooled; the callbacks are bound once per op.
type sysOp struct {
	b           []byte
	n           int
	err         error
	junk        [256]byte
	write, peek func(fd uintptr) bool
}

var sysOps = sync.Pool{New: func() any {
	o := new(sysOp)
	o.write, o.peek = o.doWrite, o.doPeek
	return o
}}

// doWrite is one non-blocking send; returning true tells the runtime not
// to wait for the socket to become writable: waiting is what we refuse.
// MSG_NOSIGNAL: a peer that reset must give EPIPE, not a signal.
func (o *sysOp) doWrite(fd uintptr) bool {
	for {
		o.n, o.err = syscall.SendmsgN(int(fd), o.b, nil, nil, syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL)
		if o.err != syscall.EINTR {
			return true
		}
	}
}

// doPeek looks for the end of the client's side. A stream never reads what
// the client sends (nothing, for a browser), so bytes in front of the FIN
// are discarded to see it; a client that keeps sending reads as open.
func (o *sysOp) doPeek(fd uintptr) bool {
	for range 16 {
		o.n, _, o.err = syscall.Recvfrom(int(fd), o.junk[:], syscall.MSG_DONTWAIT)
		if o.err == syscall.EINTR {
			continue
		}
		if o.err != nil || o.n == 0 {
			return true
		}
	}
	o.n, o.err = 1, syscall.EAGAIN
	return true
}

// trySend writes b now or reports why not: errSlow when the socket cannot
// take all of it at once (the client is not reading), another error when
// the connection is gone. A partial write leaves a torn event behind, which
// is fine: the caller closes the connection on any error.
func trySend(rc syscall.RawConn, b []byte) error {
	o := sysOps.Get().(*sysOp)
	o.b = b
	err := rc.Write(o.write)
	n, werr := o.n, o.err
	o.b, o.err = nil, nil
	sysOps.Put(o)
	switch {
	case err != nil:
		return err
	case werr == syscall.EAGAIN:
		return errSlow
	case werr != nil:
		return werr
	case n < len(b):
		return errSlow
	}
	return nil
}

// peerClosed reports whether the client has closed its side (or reset):
// a page that was closed or reloaded.
func peerClosed(rc syscall.RawConn) bool {
	o := sysOps.Get().(*sysOp)
	err := rc.Read(o.peek)
	n, rerr := o.n, o.err
	o.err = nil
	sysOps.Put(o)
	switch {
	case err != nil:
		return true
	case rerr == syscall.EAGAIN:
		return false
	case rerr != nil:
		return true
	}
	return n == 0
}
