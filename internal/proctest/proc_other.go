//go:build !linux

package proctest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
