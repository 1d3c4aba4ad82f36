package stock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// The degrade switch in Redis, shared by every edge (each applies it on its
// next refresh): degradeKey per product, degradeAllKey for all (keys.go).
//
// A switch is only replaced by a newer version (lua/degrade.lua), and a
// lifted one keeps its entry ("<version>:0"), so that an edge writing back
// what it knew after Redis lost its memory never undoes a newer change. The
// durable copy is in the order store's catalogue (package orderstore);
// package sale merges the two. Its calls are bounded by ctx alone.

var (
	//go:embed lua/degrade.lua
	degradeLua    string
	degradeScript = rueidis.NewLuaScript(degradeLua)
)

// Degrade is one degrade switch: on or lifted, as of Version (unix ms; 0:
// never set).
type Degrade struct {
	On      bool
	Version int64
}

// DegradeState reads every switch: the one of all products and those of
// single products. Entries Redis holds in another form are skipped.
func (s *Store) DegradeState(ctx context.Context) (all Degrade, products map[string]Degrade, err error) {
	res := s.c.DoMulti(ctx,
		s.c.B().Get().Key(degradeAllKey).Build(),
		s.c.B().Hgetall().Key(degradeKey).Build())
	raw, err := res[0].ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return Degrade{}, nil, fmt.Errorf("stock: read degrade switch: %w", err)
	}
	all, _ = parseDegrade(raw)
	m, err := res[1].AsStrMap()
	if err != nil {
		return Degrade{}, nil, fmt.Errorf("stock: read degrade switches: %w", err)
	}
	products = make(map[string]Degrade, len(m))
	for p, v := range m {
		if d, ok := parseDegrade(v); ok {
			products[p] = d
		}
	}
	return all, products, nil
}

// SetDegrade sets the switch of one product ("" = all) unless Redis holds a
// version at least as new; applied reports whether it was set.
func (s *Store) SetDegrade(ctx context.Context, productID string, d Degrade) (applied bool, err error) {
	key := degradeAllKey
	if productID != "" {
		if err := checkProduct(productID); err != nil {
			return false, err
		}
		key = degradeKey
	}
	if d.Version <= 0 {
		return false, fmt.Errorf("%w: degrade version %d", ErrInvalid, d.Version)
	}
	on := "0"
	if d.On {
		on = "1"
	}
	n, err := degradeScript.Exec(ctx, s.c, []string{key}, []string{productID, i64(d.Version), on}).AsInt64()
	if err != nil {
		return false, fmt.Errorf("stock: set degrade switch %q: %w", productID, err)
	}
	return n == 1, nil
}

func parseDegrade(v string) (Degrade, bool) {
	ver, on, ok := strings.Cut(v, ":")
	n, err := strconv.ParseInt(ver, 10, 64)
	if !ok || err != nil || (on != "0" && on != "1") {
		return Degrade{}, false
	}
	return Degrade{On: on == "1", Version: n}, true
}
