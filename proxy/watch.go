package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchConfig reloads when the config file changes. It watches the file's
// directory, not the file, because editors and Kubernetes config maps
// replace files by rename, which a watch on the old inode never sees. Events
// are debounced, and a reload happens only when the content really changed.
func (s *Server) WatchConfig(ctx context.Context) error {
	if s.tls != nil {
		// The certificate files change on their own schedule (renewals):
		// watched the same way, reloaded alone.
		if err := s.tls.Watch(ctx, s.snap.Load().Doc.Config.Reload.Debounce); err != nil {
			return err
		}
	}
	if s.opts.ConfigPath == "" {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	dir := filepath.Dir(s.opts.ConfigPath)
	if err := w.Add(dir); err != nil {
		w.Close()
		return err
	}
	debounce := s.snap.Load().Doc.Config.Reload.Debounce
	lastSum := sha256.Sum256(s.snap.Load().Doc.Raw)
	go func() {
		defer w.Close()
		var timer *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				s.log.Warn("config watch error", "err", err)
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				if timer == nil {
					timer = time.NewTimer(debounce)
				} else {
					timer.Reset(debounce)
				}
				fire = timer.C
			case <-fire:
				fire = nil
				data, err := os.ReadFile(s.opts.ConfigPath)
				if err != nil {
					// Mid-replace the file may be missing for a moment; a
					// later event will bring us back.
					continue
				}
				sum := sha256.Sum256(data)
				if bytes.Equal(sum[:], lastSum[:]) {
					continue
				}
				lastSum = sum
				s.Reload("file")
			}
		}
	}()
	return nil
}
