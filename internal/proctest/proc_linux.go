package proctest

import "syscall"

// Pdeathsig kills the server if the test binary dies without running its
// cleanups, so no orphaned server keeps its ports.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
