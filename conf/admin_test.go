package conf

import (
	"errors"
	"strings"
	"testing"

	"flashgate/conf/field"
)

// A container's image takes the admin address and token from its
// environment; the parsed document holds the address itself, so the
// listener, the logs and `proxy health` see an address.
func TestAdminAddrFromEnv(t *testing.T) {
	t.Setenv("FLASHGATE_TEST_ADMIN_ADDR", "0.0.0.0:9911")
	t.Setenv("FLASHGATE_TEST_TOKEN", "0123456789abcdef0123")
	doc, err := Parse([]byte("admin:\n  addr: env:FLASHGATE_TEST_ADMIN_ADDR\n  token: env:FLASHGATE_TEST_TOKEN\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if doc.Config.Admin.Addr != "0.0.0.0:9911" {
		t.Fatalf("admin.addr %q, want the environment's 0.0.0.0:9911", doc.Config.Admin.Addr)
	}
	if doc.Config.Admin.Token != "env:FLASHGATE_TEST_TOKEN" {
		t.Fatalf("the token is resolved into the document (%q): it must stay a reference, read where it is used", doc.Config.Admin.Token)
	}
}

func TestAdminFromEnvErrors(t *testing.T) {
	t.Setenv("FLASHGATE_TEST_OPEN_ADDR", "0.0.0.0:9911")
	t.Setenv("FLASHGATE_TEST_LOOPBACK_ADDR", "127.0.0.1:9911")
	t.Setenv("FLASHGATE_TEST_EMPTY", "")
	t.Setenv("FLASHGATE_TEST_SHORT", "short")
	cases := []struct {
		name, yaml string
		path       string
		msgs       []string
	}{
		{"address variable not set", "admin:\n  addr: env:FLASHGATE_TEST_NOPE\n",
			"admin.addr", []string{"FLASHGATE_TEST_NOPE", "not set"}},
		{"address variable empty", "admin:\n  addr: env:FLASHGATE_TEST_EMPTY\n",
			"admin.addr", []string{"FLASHGATE_TEST_EMPTY", "empty"}},
		{"address variable not an address", "admin:\n  addr: env:FLASHGATE_TEST_SHORT\n",
			"admin.addr", []string{"host:port"}},
		{"open address, token variable not set", "admin:\n  addr: env:FLASHGATE_TEST_OPEN_ADDR\n  token: env:FLASHGATE_TEST_NOPE\n",
			"admin.token", []string{"FLASHGATE_TEST_NOPE", "not set", "0.0.0.0:9911, from FLASHGATE_TEST_OPEN_ADDR", "loopback"}},
		{"open address, token variable empty", "admin:\n  addr: env:FLASHGATE_TEST_OPEN_ADDR\n  token: env:FLASHGATE_TEST_EMPTY\n",
			"admin.token", []string{"FLASHGATE_TEST_EMPTY", "empty", "loopback"}},
		{"open address, no token", "admin:\n  addr: env:FLASHGATE_TEST_OPEN_ADDR\n",
			"admin.token", []string{"required", "loopback"}},
		{"token too short", "admin:\n  addr: env:FLASHGATE_TEST_OPEN_ADDR\n  token: env:FLASHGATE_TEST_SHORT\n",
			"admin.token", []string{"at least 16"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "t.yaml")
			var fe field.Errors
			if !errors.As(err, &fe) {
				t.Fatalf("want field errors, got %v", err)
			}
			for _, e := range fe {
				if e.Path != tc.path {
					continue
				}
				for _, m := range tc.msgs {
					if !strings.Contains(e.Msg, m) {
						t.Fatalf("%s: %q does not say %q", e.Path, e.Msg, m)
					}
				}
				if strings.Contains(e.Msg, "short") && tc.path == "admin.token" {
					t.Fatalf("the error prints the token's value: %q", e.Msg)
				}
				return
			}
			t.Fatalf("no error at %s in: %v", tc.path, err)
		})
	}
	// A loopback address needs no token, wherever it comes from.
	if _, err := Parse([]byte("admin:\n  addr: env:FLASHGATE_TEST_LOOPBACK_ADDR\n"), "t.yaml"); err != nil {
		t.Fatalf("a loopback address from the environment: %v", err)
	}
}
