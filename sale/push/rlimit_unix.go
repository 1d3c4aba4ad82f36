//go:build unix

package push

import "syscall"

// autoMaxStreams is half the open-file limit, at most maxDefaultStreams.
func autoMaxStreams() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 1000
	}
	return int(min(rl.Cur/2, maxDefaultStreams))
}
