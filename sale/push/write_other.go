//go:build !linux

package push

import (
	"net"
	"syscall"
)

// rawConnOf: non-blocking sends are only implemented for Linux; elsewhere
// every write uses Config.WriteTimeout.
func rawConnOf(net.Conn) syscall.RawConn { return nil }

func trySend(syscall.RawConn, []byte) error { return errSlow }

func peerClosed(syscall.RawConn) bool { return false }
