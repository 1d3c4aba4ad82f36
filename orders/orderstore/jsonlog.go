package orderstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// jsonLog is one append-only JSON-lines file of the file store: locked for
// one store at a time, replayed at open, fsynced per append. Its caller
// serialises appends.
type jsonLog struct {
	f    *os.File
	w    *bufio.Writer
	size int64 // length of the complete, synced lines
}

// openLog opens (creating it if needed) the log at path, locks it, and
// hands each complete line to apply in order. A last line without its
// newline (an append a crash cut, never acknowledged) is cut off; a line
// apply refuses is an error naming its number.
func openLog(path string, apply func(line []byte) error) (*jsonLog, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, err
	}
	good, err := replay(f, apply)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return &jsonLog{f: f, w: bufio.NewWriterSize(f, 64<<10), size: good}, nil
}

// replay reads the lines and returns the length of the complete ones.
func replay(f *os.File, apply func(line []byte) error) (int64, error) {
	r := bufio.NewReaderSize(f, 64<<10)
	var off int64
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return off, nil // a partial last line (len > 0) is dropped
		}
		if err != nil {
			return 0, err
		}
		if err := apply(bytes.TrimSpace(line)); err != nil {
			return 0, fmt.Errorf("line %d: %w", n, err)
		}
		off += int64(len(line))
	}
}

// append writes complete lines and syncs them. On failure the partly
// written lines are cut off again, so that the next append does not
// continue a torn line; the caller retries.
func (l *jsonLog) append(b []byte) error {
	if err := l.write(b); err != nil {
		l.w.Reset(l.f)
		if terr := l.f.Truncate(l.size); terr == nil {
			_, _ = l.f.Seek(l.size, io.SeekStart)
		}
		return err
	}
	l.size += int64(len(b))
	return nil
}

func (l *jsonLog) write(b []byte) error {
	if _, err := l.w.Write(b); err != nil {
		return err
	}
	if err := l.w.Flush(); err != nil {
		return err
	}
	return l.f.Sync()
}

func (l *jsonLog) close() error { return l.f.Close() }
