package filters

import (
	"net/netip"
	"testing"

	"gopkg.in/yaml.v3"

	"flashgate/sale/api"
)

// specOf reads one filter mapping the way conf does: the common keys into
// Spec, the whole mapping as Params.
func specOf(t testing.TB, text string) Spec {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	var common struct {
		Type    string `yaml:"type"`
		Name    string `yaml:"name"`
		Enabled *bool  `yaml:"enabled"`
		DryRun  bool   `yaml:"dry_run"`
	}
	if err := doc.Decode(&common); err != nil {
		t.Fatal(err)
	}
	return Spec{
		Type:    common.Type,
		Name:    common.Name,
		Enabled: common.Enabled == nil || *common.Enabled,
		DryRun:  common.DryRun,
		Params:  doc.Content[0],
	}
}

func specsOf(t testing.TB, texts ...string) []Spec {
	t.Helper()
	out := make([]Spec, len(texts))
	for i, s := range texts {
		out[i] = specOf(t, s)
	}
	return out
}

// clock is the injectable clock of the tests.
type clock struct{ now int64 }

func (c *clock) Now() int64                             { return c.now }
func (c *clock) Add(d interface{ Nanoseconds() int64 }) { c.now += d.Nanoseconds() }

func newEnv() (*Env, *clock) {
	c := &clock{now: t0}
	return &Env{Now: c.Now, Zones: NewZones()}, c
}

func mustBuild(t testing.TB, env *Env, texts ...string) *Chain {
	t.Helper()
	c, errs := Build(specsOf(t, texts...), env)
	if errs != nil {
		t.Fatal(errs)
	}
	return c
}

// request runs one request from addr through c at the clock's time and
// finishes it.
func request(c *Chain, clk *clock, addr string) Verdict {
	r := Request{Call: api.Call{ClientIP: netip.MustParseAddr(addr), NowNano: clk.now}}
	v := c.Run(&r)
	r.Finish()
	return v
}
