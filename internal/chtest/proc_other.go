//go:build !linux

package chtest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
