// Package syncbuf is a bytes.Buffer that goroutines may share: a log sink
// or a child process's output that a test reads while it is written.
//
// It imports nothing of flashgate, so that any package's tests can use it
// (internal/edgetest cannot serve upstream's: it imports proxy).
package syncbuf
