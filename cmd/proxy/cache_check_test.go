package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigTestRefusesSharedAuthorization: `proxy -t` refuses a cached
// route that stores answers to requests with Authorization under a key
// that does not name it, unless the route says its answers are public.
func TestConfigTestRefusesSharedAuthorization(t *testing.T) {
	dir := t.TempDir()
	const base = "upstreams:\n  pools:\n    - {name: web, servers: [\"127.0.0.1:9\"]}\n  routes:\n" +
		"    - prefix: /api/\n      pool: web\n      cache:\n        ttl: 1s\n        with_authorization: true\n"
	for _, tc := range []struct {
		name, extra string
		ok          bool
	}{
		{"default key", "", false},
		{"keyed by Authorization", "        key: [method, host, path, query, \"header:Authorization\"]\n", true},
		{"public on purpose", "        public: true\n", true},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
		if err := os.WriteFile(path, []byte(base+tc.extra), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := run([]string{"-t", "-c", path}, &out, &errb)
		if (code == 0) != tc.ok {
			t.Errorf("%s: exit %d, want ok %v: %s", tc.name, code, tc.ok, errb.String())
		}
		if !tc.ok && !strings.Contains(errb.String(), "upstreams.routes[0].cache.with_authorization") {
			t.Errorf("%s: the error does not name the field: %s", tc.name, errb.String())
		}
	}
}
