package upstream

import (
	"strings"
	"testing"

	"flashgate/conf"
)

func TestBuildRejectsInvalidAndLeavesInputAlone(t *testing.T) {
	m := NewManager(nil)
	defer m.Close()
	c := conf.UpstreamsConfig{Pools: []conf.PoolConfig{{Name: "a", Servers: []string{"nope"}}}}
	if _, err := m.Build(c.WithDefaults()); err == nil || !strings.Contains(err.Error(), "pools[0].servers[0]") {
		t.Fatalf("Build error = %v, want one naming pools[0].servers[0]", err)
	}
	c.Pools[0].Servers[0] = "127.0.0.1:1"
	if _, err := m.Build(c.WithDefaults()); err != nil {
		t.Fatal(err)
	}
	if c.Pools[0].Balance != "" {
		t.Error("Build applied defaults to the caller's config")
	}
}
