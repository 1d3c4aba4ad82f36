package edgetest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"flashgate/conf"
	"flashgate/internal/yamlmerge"
	"flashgate/proxy"
)

// Discard is a logger that drops everything.
var Discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// WriteConfig renders base with the overrides (YAML documents) merged over
// it, in order (maps merge, lists replace), into edge.yaml in t.TempDir()
// and returns the file's path.
func WriteConfig(t testing.TB, base string, overrides ...string) string {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(base), &doc); err != nil {
		t.Fatalf("base config: %v", err)
	}
	for _, o := range overrides {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(o), &m); err != nil {
			t.Fatalf("override %q: %v", o, err)
		}
		yamlmerge.Into(doc, m)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Activities renders an `activities:` override of entries (each a YAML
// list item with its newline).
func Activities(items ...string) string { return "activities:\n" + strings.Join(items, "") }

// New loads the config file as the binary does and builds the edge on it,
// logging to log (Discard when nil); it does not serve yet.
func New(t testing.TB, path string, log *slog.Logger) (*proxy.Server, *conf.Document) {
	t.Helper()
	doc, err := conf.LoadFile(path)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	if log == nil {
		log = Discard
	}
	srv, err := proxy.New(doc, proxy.Options{ConfigPath: path, Logger: log})
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	return srv, doc
}

// Listen is a listener on a fresh loopback port.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// Edge is a proxy.Server serving on loopback.
type Edge struct {
	t     testing.TB
	Srv   *proxy.Server
	Doc   *conf.Document
	Path  string // the config file
	Addr  string // host:port of the shopper listener
	Admin string // host:port of the admin listener
	once  sync.Once
}

// Start builds an edge on the config file (New) and serves it on fresh
// loopback listeners until Stop or the end of the test.
func Start(t testing.TB, path string, log *slog.Logger) *Edge {
	t.Helper()
	srv, doc := New(t, path, log)
	ln, aln := Listen(t), Listen(t)
	e := &Edge{t: t, Srv: srv, Doc: doc, Path: path, Addr: ln.Addr().String(), Admin: aln.Addr().String()}
	go srv.Serve(ln, aln)
	t.Cleanup(e.Stop)
	return e
}

// Stop shuts the edge down (once; later calls do nothing).
func (e *Edge) Stop() {
	e.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Srv.Shutdown(ctx); err != nil {
			e.t.Logf("edge shutdown: %v", err)
		}
	})
}
