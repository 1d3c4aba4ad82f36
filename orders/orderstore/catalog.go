package orderstore

import (
	"context"
	"errors"
	"fmt"

	"flashgate/orders/order"
)

// The sale catalogue, kept beside the ledger because Redis may lose its
// memory: the activities created through the admin API, their restocks and
// the degrade switch. Redis holds a copy every edge reads each refresh; this
// one is what the copy is rebuilt from when Redis restarted empty (or went
// back in time), so that an admin-created sale comes back with its stock
// and a degraded sale stays closed.
//
// It is a set of records, one per (product, kind, id); of the records of one
// key the one with the highest Version wins (ReplacingMergeTree's rule, the
// file store's too), so writing a record again is harmless and a newer one
// replaces it. Versions are the writer's clock in unix milliseconds, bumped
// past the newest version it knows of the key, so that two changes made on
// one edge in the same millisecond still order.

// CatalogKind says what a catalogue record holds.
type CatalogKind uint8

const (
	// KindActivity is a sale's activity as the admin API last defined it
	// (Activity: JSON in the format package sale owns). ID is 0.
	KindActivity CatalogKind = 1
	// KindRestock is one restock of a sale: Units added, under its own ID,
	// so that two edges restocking at once both count. Units 0 is a
	// restock that was withdrawn (Redis refused it).
	KindRestock CatalogKind = 2
	// KindDegrade is the degrade switch of one product, or of every product
	// (ProductID AllProducts): On. ID is 0.
	KindDegrade CatalogKind = 3
)

// AllProducts is the product id of the degrade switch that closes every
// sale. It is not a valid product id (order.ValidProductID), so it cannot
// collide with one.
const AllProducts = "*"

// maxActivityLen bounds an activity document (the admin API takes 64 KiB
// bodies; the document is far smaller).
const maxActivityLen = 64 << 10

// CatalogRecord is one record of the catalogue.
type CatalogRecord struct {
	ProductID string
	Kind      CatalogKind
	ID        int64  // a restock's id; 0 for the other kinds
	Activity  string // KindActivity
	Units     int64  // KindRestock
	On        bool   // KindDegrade
	Version   int64  // the newest version of a key wins
	UpdatedMs int64  // when it was written (shown to operators; ClickHouse keeps seconds)
}

// ErrInvalidRecord wraps every catalogue record a store refuses; nothing of
// the call was stored.
var ErrInvalidRecord = errors.New("orderstore: invalid catalogue record")

// Validate checks that the record fits its kind and the schema.
func (r *CatalogRecord) Validate() error {
	bad := func(why string) error {
		return fmt.Errorf("%w: product %q, kind %d, id %d: %s", ErrInvalidRecord, r.ProductID, r.Kind, r.ID, why)
	}
	if r.Version < 0 || r.UpdatedMs < 0 || r.UpdatedMs/1000 > 1<<32-1 {
		return bad("negative version or time out of range")
	}
	if !order.ValidProductID(r.ProductID) && !(r.Kind == KindDegrade && r.ProductID == AllProducts) {
		return bad("product id")
	}
	switch r.Kind {
	case KindActivity:
		if r.ID != 0 || r.Activity == "" || len(r.Activity) > maxActivityLen {
			return bad("an activity has id 0 and a document of at most 64 KiB")
		}
	case KindRestock:
		if r.ID <= 0 || r.Units < 0 {
			return bad("a restock has a positive id and units >= 0")
		}
	case KindDegrade:
		if r.ID != 0 {
			return bad("a degrade switch has id 0")
		}
	default:
		return bad("unknown kind")
	}
	return nil
}

// Catalog is the durable sale catalogue. Both order stores implement it
// (table seckill_catalog, file catalog.jsonl).
type Catalog interface {
	// PutCatalog stores records, all or (on error) possibly some of them;
	// a record whose key already holds a newer version changes nothing
	// anyone reads. A refused record (ErrInvalidRecord) fails the whole
	// call before anything is written.
	PutCatalog(ctx context.Context, recs ...CatalogRecord) error
	// ReadCatalog reads the newest record of each key, of one product
	// ("" for every product; AllProducts for the switch of all), sorted
	// by product, kind and id.
	ReadCatalog(ctx context.Context, productID string) ([]CatalogRecord, error)
}

// CatalogEntry is one product's catalogue as its records add up.
type CatalogEntry struct {
	Activity        string // "" when the admin API never defined the sale
	ActivityVersion int64
	Restocked       int64 // the units of its restocks
	Restocks        int   // how many restocks it had (withdrawn ones not counted)
	Degraded        bool
	DegradeVersion  int64 // 0 when the switch was never set
}

// Entries adds records up per product (AllProducts holds the switch of
// every product).
func Entries(recs []CatalogRecord) map[string]CatalogEntry {
	out := map[string]CatalogEntry{}
	for i := range recs {
		r := &recs[i]
		e := out[r.ProductID]
		switch r.Kind {
		case KindActivity:
			if r.Version >= e.ActivityVersion {
				e.Activity, e.ActivityVersion = r.Activity, r.Version
			}
		case KindRestock:
			if r.Units > 0 {
				e.Restocked += r.Units
				e.Restocks++
			}
		case KindDegrade:
			if r.Version >= e.DegradeVersion {
				e.Degraded, e.DegradeVersion = r.On, r.Version
			}
		}
		out[r.ProductID] = e
	}
	return out
}

// catalogKey is the key of one record: of each key the newest version wins.
type catalogKey struct {
	product string
	kind    CatalogKind
	id      int64
}

func (r *CatalogRecord) key() catalogKey { return catalogKey{r.ProductID, r.Kind, r.ID} }

// lessRecord orders records by product, kind and id (ReadCatalog's order).
func lessRecord(a, b *CatalogRecord) bool {
	if a.ProductID != b.ProductID {
		return a.ProductID < b.ProductID
	}
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	return a.ID < b.ID
}

func validateRecords(recs []CatalogRecord) error {
	for i := range recs {
		if err := recs[i].Validate(); err != nil {
			return err
		}
	}
	return nil
}
