package redistest

import "syscall"

// Pdeathsig kills the server if the test binary dies without running its
// cleanups (a panic in another goroutine, go test -timeout), so no orphaned
// redis-server keeps a port.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
