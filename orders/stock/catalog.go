package stock

import (
	"context"
	"fmt"
)

// The admin catalog (sk:catalog): activities created or updated through the
// admin API, one JSON document per product id, whose format package sale
// owns. Its calls are bounded by ctx alone.

// Catalog reads the whole admin catalog: product id -> activity JSON.
func (s *Store) Catalog(ctx context.Context) (map[string]string, error) {
	m, err := s.c.Do(ctx, s.c.B().Hgetall().Key(catalogKey).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("stock: read catalog: %w", err)
	}
	return m, nil
}

// PutCatalog writes one product's catalog entry.
func (s *Store) PutCatalog(ctx context.Context, productID, activityJSON string) error {
	if err := checkProduct(productID); err != nil {
		return err
	}
	if err := s.c.Do(ctx, s.c.B().Hset().Key(catalogKey).FieldValue().FieldValue(productID, activityJSON).Build()).Error(); err != nil {
		return fmt.Errorf("stock: write catalog: %w", err)
	}
	return nil
}
