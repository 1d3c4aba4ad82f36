package layout

import (
	"encoding/json"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// rank orders the wings from the bottom up: a package may import its own
// wing and the wings below it, never one above. docs/architecture.md states
// the same table; this test keeps the two from drifting apart.
var wings = []struct {
	name     string
	rank     int
	prefixes []string
}{
	{"leaves", 0, []string{"conf", "metrics"}},
	{"orders", 1, []string{"orders"}},
	{"sale", 2, []string{"sale"}},
	{"edge", 3, []string{"filters", "upstream", "static", "proxy"}},
	{"binary", 4, []string{"cmd"}},
	// Tools and tests sit beside the product: they may use it, it never
	// uses them.
	{"tools", 5, []string{"bench", "internal", "test"}},
}

func wingOf(rel string) (string, int) {
	for _, w := range wings {
		for _, p := range w.prefixes {
			if rel == p || strings.HasPrefix(rel, p+"/") {
				return w.name, w.rank
			}
		}
	}
	return "", -1
}

type pkg struct {
	ImportPath string
	Imports    []string
}

func listPackages(t *testing.T) (string, []pkg) {
	t.Helper()
	mod, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	module := strings.TrimSpace(string(mod))
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return module, pkgs
}

// TestImportsRunOneWay checks the production imports (test files are not
// listed by .Imports) of every package against the wing table.
func TestImportsRunOneWay(t *testing.T) {
	module, pkgs := listPackages(t)
	var bad []string
	for _, p := range pkgs {
		from := strings.TrimPrefix(p.ImportPath, module+"/")
		fw, fr := wingOf(from)
		if fr < 0 {
			bad = append(bad, from+": in no wing (add it to docs/architecture.md and this table)")
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := strings.TrimPrefix(imp, module+"/")
			tw, tr := wingOf(to)
			if tr > fr {
				bad = append(bad, from+" ("+fw+") imports "+to+" ("+tw+"), a wing above it")
			}
			// The sale wing's root package is its entry, the API the
			// edge calls; its parts must not reach back into it.
			if to == "sale" && strings.HasPrefix(from, "sale/") {
				bad = append(bad, from+" imports its wing's root "+to)
			}
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// TestConfIsData: conf holds types, defaults, validation and the strict
// decoder; nothing it imports may be above it.
func TestConfIsData(t *testing.T) {
	module, _ := listPackages(t)
	out, err := exec.Command("go", "list", "-deps", module+"/conf").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(dep, module+"/")
		if rel != dep && rel != "conf" && !strings.HasPrefix(rel, "conf/") {
			t.Errorf("conf depends on %s", rel)
		}
	}
}

// TestBenchIsAClient: bench drives the edge over HTTP and its binary's
// flags, like any operator; it never links the edge in.
func TestBenchIsAClient(t *testing.T) {
	module, _ := listPackages(t)
	out, err := exec.Command("go", "list", "-deps", module+"/bench/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(dep, module+"/")
		if w, _ := wingOf(rel); rel != dep && (w == "edge" || w == "binary") {
			t.Errorf("bench depends on %s", rel)
		}
	}
}
