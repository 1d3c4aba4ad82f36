package conf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStaticDefaults(t *testing.T) {
	c := Defaults().Static
	if c.MaxAge != 5*time.Minute || c.PageCacheControl != "no-cache" {
		t.Fatalf("defaults = %+v", c)
	}
	c = StaticConfig{MaxAge: time.Hour, PageCacheControl: "no-store"}
	c.fill()
	if c.MaxAge != time.Hour || c.PageCacheControl != "no-store" {
		t.Fatalf("fill overwrote settings: %+v", c)
	}
}

func TestStaticValidate(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "index.html"), []byte("<p>hi</p>"), 0o644)
	empty := t.TempDir()
	file := filepath.Join(dir, "index.html")

	tests := []struct {
		name string
		c    StaticConfig
		path string // "" = valid
		msg  string
	}{
		{"defaults", StaticConfig{}, "", ""},
		{"dir ok", StaticConfig{Dir: dir}, "", ""},
		{"dir missing", StaticConfig{Dir: filepath.Join(dir, "nope")}, "dir", "no such file"},
		{"dir is a file", StaticConfig{Dir: file}, "dir", "not a directory"},
		{"dir without page", StaticConfig{Dir: empty}, "dir", "no index.html"},
		{"negative max age", StaticConfig{MaxAge: -time.Second}, "max_age", "negative"},
		{"fractional max age", StaticConfig{MaxAge: 1500 * time.Millisecond}, "max_age", "whole seconds"},
		{"header injection", StaticConfig{CacheControl: "public\r\nSet-Cookie: x=1"}, "cache_control", "one line"},
		{"page header injection", StaticConfig{PageCacheControl: "no-cache\n"}, "page_cache_control", "one line"},
		{"origin ok", StaticConfig{ImageOrigins: []string{"https://img.example.com", "https://cdn.example.com:8443/"}}, "", ""},
		{"origin http", StaticConfig{ImageOrigins: []string{"http://img.example.com"}}, "image_origins[0]", "https"},
		{"origin path", StaticConfig{ImageOrigins: []string{"https://ok.example.com", "https://img.example.com/p"}}, "image_origins[1]", "origin only"},
		{"origin junk", StaticConfig{ImageOrigins: []string{"img.example.com"}}, "image_origins[0]", "origin"},
		{"origin csp injection", StaticConfig{ImageOrigins: []string{"https://a.example.com;script-src"}}, "image_origins[0]", "origin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			c.fill()
			errs := c.Validate()
			if tt.path == "" {
				if len(errs) != 0 {
					t.Fatalf("unexpected errors: %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Path != tt.path || !strings.Contains(errs[0].Msg, tt.msg) {
				t.Fatalf("errors = %v, want one at %q containing %q", errs, tt.path, tt.msg)
			}
		})
	}
}
