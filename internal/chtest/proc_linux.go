package chtest

import "syscall"

// Pdeathsig kills the server if the test binary dies without running its
// cleanups (a panic in another goroutine, go test -timeout), so no orphaned
// clickhouse-server keeps its ports.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
