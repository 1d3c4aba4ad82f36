package stock

import (
	"context"
	"fmt"
	"strconv"
)

// The admin catalog in Redis: activities created or updated through the
// admin API, one JSON document per product id (sk:catalog), whose format
// package sale owns, and the version of each (sk:catalog:ver). It is the
// copy every edge reads each refresh; the durable catalogue (package
// orderstore) is the original it is rebuilt from when Redis lost it, which
// the versions tell: a copy older than the original is written again.
//
// The two keys are two slots on a cluster, so an entry and its version are
// written one after the other, document first: an entry whose version write
// was lost reads older than it is and is merely written again. Its calls are
// bounded by ctx alone.

// CatalogEntry is one product's entry: the activity document and its
// version (0: written before entries had versions, or its version was
// lost).
type CatalogEntry struct {
	Activity string
	Version  int64
}

// Catalog reads the whole admin catalog: product id -> entry.
func (s *Store) Catalog(ctx context.Context) (map[string]CatalogEntry, error) {
	res := s.c.DoMulti(ctx,
		s.c.B().Hgetall().Key(catalogKey).Build(),
		s.c.B().Hgetall().Key(catalogVersionKey).Build())
	docs, err := res[0].AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("stock: read catalog: %w", err)
	}
	vers, err := res[1].AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("stock: read catalog versions: %w", err)
	}
	out := make(map[string]CatalogEntry, len(docs))
	for p, js := range docs {
		v, _ := strconv.ParseInt(vers[p], 10, 64)
		out[p] = CatalogEntry{Activity: js, Version: v}
	}
	return out, nil
}

// PutCatalog writes one product's entry, replacing what Redis holds: an
// admin change, already in the durable catalogue.
func (s *Store) PutCatalog(ctx context.Context, productID string, e CatalogEntry) error {
	if err := checkProduct(productID); err != nil {
		return err
	}
	return s.putCatalog(ctx, productID, e)
}

// putCatalog is PutCatalog of a product id already checked.
func (s *Store) putCatalog(ctx context.Context, productID string, e CatalogEntry) error {
	if err := s.c.Do(ctx, s.c.B().Hset().Key(catalogKey).FieldValue().FieldValue(productID, e.Activity).Build()).Error(); err != nil {
		return fmt.Errorf("stock: write catalog: %w", err)
	}
	return s.putCatalogVersion(ctx, productID, e.Version)
}

// RestoreCatalog writes back an entry of the durable catalogue that Redis
// lost (present false: Redis had no entry when the caller read it) or
// holds an older version of. A lost entry is only created if it is still
// missing, so that an admin change made meanwhile on another edge is never
// overwritten with the older document; restored reports whether anything
// was written.
func (s *Store) RestoreCatalog(ctx context.Context, productID string, e CatalogEntry, present bool) (restored bool, err error) {
	if err := checkProduct(productID); err != nil {
		return false, err
	}
	if present {
		return true, s.putCatalog(ctx, productID, e)
	}
	set, err := s.c.Do(ctx, s.c.B().Hsetnx().Key(catalogKey).Field(productID).Value(e.Activity).Build()).AsBool()
	if err != nil {
		return false, fmt.Errorf("stock: restore catalog: %w", err)
	}
	if !set {
		return false, nil
	}
	return true, s.putCatalogVersion(ctx, productID, e.Version)
}

func (s *Store) putCatalogVersion(ctx context.Context, productID string, v int64) error {
	if err := s.c.Do(ctx, s.c.B().Hset().Key(catalogVersionKey).FieldValue().FieldValue(productID, strconv.FormatInt(v, 10)).Build()).Error(); err != nil {
		return fmt.Errorf("stock: write catalog version: %w", err)
	}
	return nil
}
