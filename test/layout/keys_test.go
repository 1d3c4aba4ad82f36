package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// keysFile is the one file that may spell a Redis key or channel name.
const keysFile = "orders/stock/keys.go"

// TestKeysBuiltInKeysGo fails when a Redis key or channel name is built
// outside orders/stock/keys.go, in any production file of the module
// (bench included; test files may spell the keys they check). It flags:
//
//   - a string literal that starts with "sk:" (every key and channel does),
//     or is a piece of a hash tag: starts with "}:" or ends with ":{";
//   - in orders/stock and bench, a literal equal to one of keys.go's
//     *Suffix constants concatenated with "+" (prefix(p) + "o:");
//   - in orders/stock, a use of keys.go's pieces — prefix, keyPrefix,
//     rateKeyPrefix, keySpace or a *Suffix constant — anywhere but keys.go.
//
// Doc comments are not literals: they may name keys freely.
func TestKeysBuiltInKeysGo(t *testing.T) {
	root := moduleRoot(t)
	suffixes, pieces := keyPieces(t, filepath.Join(root, keysFile))
	if len(suffixes) < 10 {
		t.Fatalf("%s: found %d *Suffix constants; has the layout moved?", keysFile, len(suffixes))
	}
	var bad []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || rel == keysFile {
			return nil
		}
		bad = append(bad, keyLiterals(t, path, rel, suffixes, pieces)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Errorf("%s (build it in %s)", b, keysFile)
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// keyPieces reads keys.go: the values of its *Suffix constants, and the
// names that only it may use (prefix and the key constants' parts).
func keyPieces(t *testing.T, path string) (suffixes, pieces map[string]bool) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	suffixes = map[string]bool{}
	pieces = map[string]bool{"prefix": true, "keyPrefix": true, "rateKeyPrefix": true, "keySpace": true}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasSuffix(n.Name, "Suffix") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					suffixes[v] = true
					pieces[n.Name] = true
				}
			}
		}
	}
	return suffixes, pieces
}

// keyLiterals lists what file rel spells of a key name outside keys.go.
func keyLiterals(t *testing.T, path, rel string, suffixes, pieces map[string]bool) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	inStock := strings.HasPrefix(rel, "orders/stock/")
	concat := inStock || strings.HasPrefix(rel, "bench/")
	var bad []string
	flag := func(n ast.Node, what string) {
		p := fset.Position(n.Pos())
		bad = append(bad, rel+":"+strconv.Itoa(p.Line)+": "+what)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				break
			}
			v, _ := strconv.Unquote(n.Value)
			if strings.HasPrefix(v, "sk:") || strings.HasPrefix(v, "}:") || strings.HasSuffix(v, ":{") {
				flag(n, "key literal "+strconv.Quote(v))
			}
		case *ast.BinaryExpr:
			if n.Op != token.ADD || !concat {
				break
			}
			for _, side := range []ast.Expr{n.X, n.Y} {
				if lit, ok := side.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, _ := strconv.Unquote(lit.Value); suffixes[v] {
						flag(n, "key suffix "+lit.Value+" concatenated")
					}
				}
			}
		case *ast.SelectorExpr:
			// p.prefix is a field, not keys.go's prefix: look at X only.
			ast.Inspect(n.X, func(m ast.Node) bool {
				if id, ok := m.(*ast.Ident); ok && inStock && pieces[id.Name] {
					flag(id, "keys.go's "+id.Name+" used")
				}
				return true
			})
			return false
		case *ast.KeyValueExpr:
			// a struct literal's field name (prefix: ...) is no use of prefix.
			if _, ok := n.Key.(*ast.Ident); ok {
				ast.Inspect(n.Value, func(m ast.Node) bool {
					if id, ok := m.(*ast.Ident); ok && inStock && pieces[id.Name] {
						flag(id, "keys.go's "+id.Name+" used")
					}
					return true
				})
				return false
			}
		case *ast.Field:
			// a struct field or parameter named prefix declares, not uses.
			return false
		case *ast.Ident:
			if inStock && pieces[n.Name] {
				flag(n, "keys.go's "+n.Name+" used")
			}
		}
		return true
	})
	return bad
}
