package conf

import (
	"errors"
	"strings"
	"testing"

	"flashgate/conf/field"
)

func TestAdminHosts(t *testing.T) {
	doc, err := Parse([]byte("admin:\n  hosts: [\"Edge-1.Internal.\", \"[::1]\"]\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a := doc.Config.Admin
	if !a.AllowedHost("edge-1.internal") || !a.AllowedHost("::1") || a.AllowedHost("edge-2.internal") {
		t.Fatalf("AllowedHost over %q", a.Hosts)
	}
	for _, bad := range []string{`""`, `"edge:9901"`, `"*.internal"`, `"a b"`} {
		_, err := Parse([]byte("admin:\n  hosts: ["+bad+"]\n"), "t.yaml")
		var fe field.Errors
		if !errors.As(err, &fe) || fe[0].Path != "admin.hosts[0]" || fe[0].Line != 2 {
			t.Errorf("hosts [%s]: %v", bad, err)
		}
	}
	if _, err := Parse([]byte("admin:\n  hosts: [\"edge:9901\"]\n"), "t.yaml"); err == nil || !strings.Contains(err.Error(), "port") {
		t.Errorf("a port in admin.hosts: %v", err)
	}
}
