//go:build !unix

package push

// autoMaxStreams: without RLIMIT_NOFILE, a conservative fixed bound.
func autoMaxStreams() int { return 10_000 }
