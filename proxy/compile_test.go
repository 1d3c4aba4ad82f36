package proxy

import (
	"strings"
	"testing"

	"flashgate/conf"
	"flashgate/filters"
	"flashgate/upstream"
)

func compileString(t *testing.T, y string) (*Snapshot, error) {
	t.Helper()
	doc, err := conf.Parse([]byte(y), "t.yaml")
	if err != nil {
		return nil, err
	}
	return Compile(doc, &Env{Zones: filters.NewZones(), Upstreams: upstream.NewManager(nil)}, 1)
}

func TestCompileSplitsChainsByScope(t *testing.T) {
	snap, err := compileString(t, `
filters:
  - type: access
    scope: all
    rules: ["allow all"]
  - type: ip_limit
    rate: 10r/s
  - type: conn_limit
    max: 3
    enabled: false
`)
	if err != nil {
		t.Fatal(err)
	}
	if snap.APIChain.Len() != 2 || snap.EdgeChain.Len() != 1 || snap.EdgeChain.Entries()[0].Name != "access" {
		t.Fatalf("api %d edge %d", snap.APIChain.Len(), snap.EdgeChain.Len())
	}
}

func TestCompileErrorsCarryPathAndLine(t *testing.T) {
	_, err := compileString(t, `
filters:
  - type: ip_limit
    rate: 10r/s
  - type: ip_limit
    rate: 5r/s
  - type: nosuch
`)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"filters[1].name (line 5)", "filters[2].type (line 7)", "known types"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}
