package stock

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
)

// Both the real server and the embedded one run the switch's script.
func TestDegradeSwitchNewestVersionWins(t *testing.T) {
	onBothServers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		set := func(p string, on bool, v int64, want bool) {
			t.Helper()
			applied, err := s.SetDegrade(ctx, p, Degrade{On: on, Version: v})
			if err != nil || applied != want {
				t.Fatalf("SetDegrade(%q, %v, %d) = %v %v, want %v", p, on, v, applied, err, want)
			}
		}
		all, ps, err := s.DegradeState(ctx)
		if err != nil || all != (Degrade{}) || len(ps) != 0 {
			t.Fatalf("fresh Redis: %+v %v %v", all, ps, err)
		}
		set("d1", true, 100, true)
		set("d1", false, 100, false) // the same version: already there
		set("d1", false, 99, false)  // an older write-back changes nothing
		set("d2", true, 5, true)
		set("d2", false, 6, true) // lifted, and its version kept
		set("", true, 50, true)
		set("", false, 40, false)
		all, ps, err = s.DegradeState(ctx)
		want := map[string]Degrade{"d1": {On: true, Version: 100}, "d2": {Version: 6}}
		if err != nil || all != (Degrade{On: true, Version: 50}) || !reflect.DeepEqual(ps, want) {
			t.Fatalf("state %+v %v %v, want all on at 50 and %v", all, ps, err, want)
		}
		if _, err := s.SetDegrade(ctx, "bad id", Degrade{On: true, Version: 1}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("bad product id: %v", err)
		}
		if _, err := s.SetDegrade(ctx, "d1", Degrade{On: true}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("no version: %v", err)
		}
	})
}

func TestCatalogVersionsAndRestore(t *testing.T) {
	s, srv := openReal(t, Options{})
	ctx := context.Background()
	if err := s.PutCatalog(ctx, "c1", CatalogEntry{Activity: `{"a":1}`, Version: 10}); err != nil {
		t.Fatal(err)
	}
	m, err := s.Catalog(ctx)
	if err != nil || !reflect.DeepEqual(m, map[string]CatalogEntry{"c1": {`{"a":1}`, 10}}) {
		t.Fatalf("catalog %v %v", m, err)
	}

	// An entry written before versions existed reads as version 0.
	c := redistest.Client(t, srv.Addr())
	if err := c.Do(ctx, c.B().Hset().Key("sk:catalog").FieldValue().FieldValue("old", `{"a":0}`).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.Catalog(ctx); m["old"] != (CatalogEntry{`{"a":0}`, 0}) {
		t.Fatalf("unversioned entry %+v", m["old"])
	}

	// A restore of a lost entry never overwrites one written meanwhile.
	if ok, err := s.RestoreCatalog(ctx, "c1", CatalogEntry{`{"a":"older"}`, 5}, false); ok || err != nil {
		t.Fatalf("restore over an existing entry: %v %v", ok, err)
	}
	// A stale one (the caller saw it older) is replaced.
	if ok, err := s.RestoreCatalog(ctx, "c1", CatalogEntry{`{"a":2}`, 20}, true); !ok || err != nil {
		t.Fatalf("restore of a stale entry: %v %v", ok, err)
	}
	srv.Restart() // Redis loses its memory
	var restored bool
	await.NoError(t, 10*time.Second, "restore after the restart", func() (err error) {
		restored, err = s.RestoreCatalog(ctx, "c2", CatalogEntry{`{"b":1}`, 30}, false)
		return err
	})
	if !restored {
		t.Fatal("a lost entry was not restored")
	}
	if m, err := s.Catalog(ctx); err != nil || !reflect.DeepEqual(m, map[string]CatalogEntry{"c2": {`{"b":1}`, 30}}) {
		t.Fatalf("after the restart %v %v", m, err)
	}
}
