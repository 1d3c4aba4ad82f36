package orderstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	"flashgate/orders/order"
)

// FileName is the order log's name inside the directory given to
// OpenFile, CatalogFileName the catalogue's.
const (
	FileName        = "orders.jsonl"
	CatalogFileName = "catalog.jsonl"
)

// fileRow is a Row as one JSON line.
type fileRow struct {
	OrderID    int64  `json:"o"`
	ProductID  string `json:"p"`
	UserID     string `json:"u"`
	Qty        int    `json:"q"`
	PriceCents int64  `json:"c"`
	Status     uint8  `json:"s"`
	CreatedMs  int64  `json:"t"`
	UpdatedMs  int64  `json:"v"`
	Edge       int    `json:"e"`
	// Absent in lines written before pay deadlines: no deadline, not
	// paid, not expired.
	PayByMs int64 `json:"b,omitempty"`
	PaidMs  int64 `json:"pt,omitempty"`
	Expired bool  `json:"x,omitempty"`
}

func fileRowOf(r *Row) fileRow {
	return fileRow{OrderID: r.ID, ProductID: r.ProductID, UserID: r.UserID, Qty: r.Qty, PriceCents: r.PriceCents,
		Status: r.Status, CreatedMs: r.CreatedMs, UpdatedMs: r.UpdatedMs, Edge: r.Edge,
		PayByMs: r.PayByMs, PaidMs: r.PaidMs, Expired: r.Expired}
}

func (fr *fileRow) row() Row {
	return Row{Order: order.Order{ID: fr.OrderID, ProductID: fr.ProductID, UserID: fr.UserID, Qty: fr.Qty,
		PriceCents: fr.PriceCents, CreatedMs: fr.CreatedMs, Edge: fr.Edge, PayByMs: fr.PayByMs},
		Status: fr.Status, UpdatedMs: fr.UpdatedMs, PaidMs: fr.PaidMs, Expired: fr.Expired}
}

// File is the embedded Store: an append-only JSON-lines log, fsynced per
// Insert, replayed into memory at open, and the catalogue's own log beside
// it (CatalogFileName). For demos and single-node trials (see the package
// doc): one process per directory, the whole ledger in memory, the logs grow
// by one line per event and are never compacted.
type File struct {
	mu     sync.Mutex
	orders *jsonLog
	// rows are the newest row of each order, by product: one map of a
	// product's orders keyed by the id alone (one lookup of an integer per
	// order stored, where a key of product and id hashed the product's
	// name each time and a second map listed the product's ids).
	rows    map[string]map[int64]Row
	tallies map[string]*fileTally // Totals per product, kept as rows are applied
	cat     *jsonLog
	catalog map[catalogKey]CatalogRecord
	closed  bool
}

// OpenFile opens (creating them if needed) the logs in dir and loads them.
// A last line without its newline — a crash in the middle of an append that
// was therefore never acknowledged — is cut off; any other unreadable line
// is an error.
func OpenFile(dir string) (*File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("orderstore: %w", err)
	}
	s := &File{rows: map[string]map[int64]Row{}, tallies: map[string]*fileTally{}, catalog: map[catalogKey]CatalogRecord{}}
	var err error
	s.orders, err = openLog(filepath.Join(dir, FileName), func(line []byte) error {
		var fr fileRow
		if err := json.Unmarshal(line, &fr); err != nil {
			return err
		}
		s.apply(fr.row())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("orderstore: %w", err)
	}
	s.cat, err = openLog(filepath.Join(dir, CatalogFileName), func(line []byte) error {
		var fc fileCatalog
		if err := json.Unmarshal(line, &fc); err != nil {
			return err
		}
		s.applyCatalog(fc.record())
		return nil
	})
	if err != nil {
		s.orders.close()
		return nil, fmt.Errorf("orderstore: %w", err)
	}
	return s, nil
}

func (s *File) apply(r Row) {
	rows := s.rows[r.ProductID]
	if rows == nil {
		rows = map[int64]Row{}
		s.rows[r.ProductID] = rows
		s.tallies[r.ProductID] = &fileTally{users: map[string]int64{}}
	}
	old, replaced := rows[r.ID]
	if replaced && !Newer(&r, &old) {
		return
	}
	rows[r.ID] = r
	ft := s.tallies[r.ProductID]
	if replaced {
		ft.count(&old, -1)
	}
	ft.count(&r, 1)
}

// fileTally is one product's Totals, counted as rows are applied rather
// than over all its rows per call: the edge samples Totals every 2 s for
// its gauges, and with a few hundred thousand orders the full count was a
// quarter of the order consumer's CPU under load (perf, bench compare
// attempts).
type fileTally struct {
	t     Totals
	users map[string]int64 // units held (status 0 and 1) per user
	// maxStale: the user with the most units lost some, so who is first
	// now is counted again from users by the next Totals.
	maxStale bool
}

// count adds (sign 1) or takes away (sign -1) a row's share.
func (ft *fileTally) count(r *Row, sign int64) {
	q := int64(r.Qty) * sign
	held := false
	switch {
	case r.Status == StatusUnpaid:
		ft.t.UnpaidOrders += sign
		ft.t.UnpaidUnits += q
		held = true
	case r.Status == StatusPaid:
		ft.t.PaidOrders += sign
		ft.t.PaidUnits += q
		held = true
	case r.Expired:
		ft.t.ExpiredOrders += sign
		ft.t.ExpiredUnits += q
	default:
		ft.t.CancelledOrders += sign
		ft.t.CancelledUnits += q
	}
	if !held {
		return
	}
	u := r.UserID
	n := ft.users[u] + q
	if n == 0 {
		delete(ft.users, u)
	} else {
		ft.users[u] = n
	}
	switch {
	case sign < 0:
		ft.maxStale = ft.maxStale || u == ft.t.MaxUser
	case !ft.maxStale && (n > ft.t.MaxUserUnits || n == ft.t.MaxUserUnits && u < ft.t.MaxUser):
		ft.t.MaxUser, ft.t.MaxUserUnits = u, n
	}
}

// totals is the tally, with the first user counted again if it is stale:
// the most units, the smallest id among equals.
func (ft *fileTally) totals() Totals {
	if ft.maxStale {
		ft.t.MaxUser, ft.t.MaxUserUnits = "", 0
		for u, n := range ft.users {
			if n > ft.t.MaxUserUnits || n == ft.t.MaxUserUnits && u < ft.t.MaxUser {
				ft.t.MaxUser, ft.t.MaxUserUnits = u, n
			}
		}
		ft.maxStale = false
	}
	return ft.t
}

// Insert appends the rows and fsyncs before it returns.
func (s *File) Insert(ctx context.Context, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			return err
		}
	}
	return appendAll(ctx, s, s.orders, "append", rows, appendFileRow, s.apply)
}

// appendFileRow appends r as encoding/json writes its fileRow, newline
// included (TestAppendFileRowMatchesJSON), without reflection: the
// consumer stores every order through it. r must be valid: a valid row's
// product and user ids are letters, digits and _ . @ -, which JSON takes
// as they are.
func appendFileRow(dst []byte, r *Row) ([]byte, error) {
	dst = strconv.AppendInt(append(dst, `{"o":`...), r.ID, 10)
	dst = append(append(append(dst, `,"p":"`...), r.ProductID...), '"')
	dst = append(append(append(dst, `,"u":"`...), r.UserID...), '"')
	dst = strconv.AppendInt(append(dst, `,"q":`...), int64(r.Qty), 10)
	dst = strconv.AppendInt(append(dst, `,"c":`...), r.PriceCents, 10)
	dst = strconv.AppendInt(append(dst, `,"s":`...), int64(r.Status), 10)
	dst = strconv.AppendInt(append(dst, `,"t":`...), r.CreatedMs, 10)
	dst = strconv.AppendInt(append(dst, `,"v":`...), r.UpdatedMs, 10)
	dst = strconv.AppendInt(append(dst, `,"e":`...), int64(r.Edge), 10)
	if r.PayByMs != 0 {
		dst = strconv.AppendInt(append(dst, `,"b":`...), r.PayByMs, 10)
	}
	if r.PaidMs != 0 {
		dst = strconv.AppendInt(append(dst, `,"pt":`...), r.PaidMs, 10)
	}
	if r.Expired {
		dst = append(dst, `,"x":true`...)
	}
	return append(dst, "}\n"...), nil
}

// appendJSON appends v as a json.Encoder writes it.
func appendJSON(dst []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(append(dst, b...), '\n'), nil
}

// appendAll encodes items one JSON line each (line appends one, its
// newline included), appends them to the log with one fsync and applies
// them to the in-memory view, under the store's lock.
func appendAll[T any](ctx context.Context, s *File, log *jsonLog, what string, items []T, line func([]byte, *T) ([]byte, error), apply func(T)) error {
	buf := make([]byte, 0, 160*len(items)) // an order's line is ~150 bytes: no growing and copying
	for i := range items {
		var err error
		if buf, err = line(buf, &items[i]); err != nil {
			return fmt.Errorf("orderstore: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("orderstore: file store closed")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := log.append(buf); err != nil {
		return fmt.Errorf("orderstore: %s: %w", what, err)
	}
	for i := range items {
		apply(items[i])
	}
	return nil
}

// Get reads the newest row of one order.
func (s *File) Get(_ context.Context, productID string, orderID int64) (Row, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[productID][orderID]
	return r, ok, nil
}

// Totals counts one product's orders (kept as rows are applied: fileTally).
func (s *File) Totals(_ context.Context, productID string) (Totals, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ft := s.tallies[productID]; ft != nil {
		return ft.totals(), nil
	}
	return Totals{}, nil
}

// Buyers is the held (status 0 and 1) units per user of one product.
func (s *File) Buyers(_ context.Context, productID string) (map[string]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int64{}
	for _, r := range s.rows[productID] {
		if r.Status != StatusCancelled {
			out[r.UserID] += int64(r.Qty)
		}
	}
	return out, nil
}

// Statuses reads the status of the stored ones of orderIDs.
func (s *File) Statuses(_ context.Context, productID string, orderIDs []int64) (map[int64]OrderStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int64]OrderStatus, len(orderIDs))
	rows := s.rows[productID]
	for _, id := range orderIDs {
		if r, ok := rows[id]; ok {
			out[id] = r.orderStatus()
		}
	}
	return out, nil
}

// Deadlines lists the unpaid rows with a pay deadline, by deadline.
func (s *File) Deadlines(_ context.Context, productID string) ([]Row, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Row{}
	for _, r := range s.rows[productID] {
		if r.Status == StatusUnpaid && r.PayByMs > 0 {
			out = append(out, r)
		}
	}
	sortDeadlines(out)
	return out, nil
}

// Settled lists a page of the settled rows, by order id.
func (s *File) Settled(_ context.Context, productID string, afterID int64, limit int) ([]Row, error) {
	return s.page("settled", productID, afterID, limit, func(r *Row) bool { return r.Status != StatusUnpaid })
}

// Rows lists a page of every row, by order id.
func (s *File) Rows(_ context.Context, productID string, afterID int64, limit int) ([]Row, error) {
	return s.page("rows", productID, afterID, limit, func(*Row) bool { return true })
}

// page lists the rows after afterID that keep says to keep, by order id,
// at most limit.
func (s *File) page(what, productID string, afterID int64, limit int, keep func(*Row) bool) ([]Row, error) {
	if limit < 1 {
		return nil, fmt.Errorf("orderstore: %s %s: limit %d", what, productID, limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Row{}
	for id, r := range s.rows[productID] {
		if id > afterID && keep(&r) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out[:min(limit, len(out))], nil
}

// Products lists the products with at least one row.
func (s *File) Products(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.rows))
	for p := range s.rows {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// Close closes the logs; everything written is already synced.
func (s *File) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return errors.Join(s.orders.close(), s.cat.close())
}

// fileCatalog is a CatalogRecord as one JSON line.
type fileCatalog struct {
	ProductID string      `json:"p"`
	Kind      CatalogKind `json:"k"`
	ID        int64       `json:"i,omitempty"`
	Activity  string      `json:"a,omitempty"`
	Units     int64       `json:"n,omitempty"`
	On        bool        `json:"d,omitempty"`
	Version   int64       `json:"v"`
	UpdatedMs int64       `json:"t"`
}

func (fc *fileCatalog) record() CatalogRecord { return CatalogRecord(*fc) }

func (s *File) applyCatalog(r CatalogRecord) {
	k := r.key()
	if old, ok := s.catalog[k]; ok && r.Version < old.Version {
		return
	}
	s.catalog[k] = r
}

// PutCatalog appends the records and fsyncs before it returns.
func (s *File) PutCatalog(ctx context.Context, recs ...CatalogRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if err := validateRecords(recs); err != nil {
		return err
	}
	return appendAll(ctx, s, s.cat, "catalogue append", recs, func(dst []byte, r *CatalogRecord) ([]byte, error) {
		return appendJSON(dst, fileCatalog(*r))
	}, s.applyCatalog)
}

// ReadCatalog reads the newest record of each key.
func (s *File) ReadCatalog(_ context.Context, productID string) ([]CatalogRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("orderstore: file store closed")
	}
	out := []CatalogRecord{}
	for k, r := range s.catalog {
		if productID == "" || k.product == productID {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return lessRecord(&out[i], &out[j]) })
	return out, nil
}

var _ Store = (*File)(nil)
