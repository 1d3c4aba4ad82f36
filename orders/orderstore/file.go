package orderstore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"flashgate/orders/order"
)

// FileName is the log's name inside the directory given to OpenFile.
const FileName = "orders.jsonl"

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
}

func fileRowOf(r *Row) fileRow {
	return fileRow{OrderID: r.ID, ProductID: r.ProductID, UserID: r.UserID, Qty: r.Qty, PriceCents: r.PriceCents,
		Status: r.Status, CreatedMs: r.CreatedMs, UpdatedMs: r.UpdatedMs, Edge: r.Edge}
}

func (fr *fileRow) row() Row {
	return Row{Order: order.Order{ID: fr.OrderID, ProductID: fr.ProductID, UserID: fr.UserID, Qty: fr.Qty,
		PriceCents: fr.PriceCents, CreatedMs: fr.CreatedMs, Edge: fr.Edge}, Status: fr.Status, UpdatedMs: fr.UpdatedMs}
}

type fileKey struct {
	product string
	order   int64
}

// File is the embedded Store: an append-only JSON-lines log, fsynced per
// Insert, replayed into memory at open. For demos and single-node trials
// (see the package doc): one process per directory, the whole ledger in
// memory, the log grows by one line per event and is never compacted.
type File struct {
	mu       sync.Mutex
	f        *os.File
	w        *bufio.Writer
	rows     map[fileKey]Row
	products map[string]map[int64]struct{}
	size     int64 // length of the complete, synced lines
	closed   bool
}

// OpenFile opens (creating it if needed) the log in dir and loads it. A
// last line without its newline — a crash in the middle of an Insert that
// was therefore never acknowledged — is cut off; any other unreadable line
// is an error.
func OpenFile(dir string) (*File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("orderstore: %w", err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("orderstore: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("orderstore: %w", err)
	}
	s := &File{f: f, rows: map[fileKey]Row{}, products: map[string]map[int64]struct{}{}}
	good, err := s.load(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("orderstore: %s: %w", path, err)
	}
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, fmt.Errorf("orderstore: %w", err)
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("orderstore: %w", err)
	}
	s.w = bufio.NewWriterSize(f, 64<<10)
	s.size = good
	return s, nil
}

// load replays the log and returns the length of its complete lines.
func (s *File) load(f *os.File) (int64, error) {
	r := bufio.NewReaderSize(f, 64<<10)
	var off int64
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return off, nil // a partial last line (len > 0) is dropped
		}
		if err != nil {
			return 0, err
		}
		var fr fileRow
		if err := json.Unmarshal(bytes.TrimSpace(line), &fr); err != nil {
			return 0, fmt.Errorf("line %d: %w", n, err)
		}
		s.apply(fr.row())
		off += int64(len(line))
	}
}

func (s *File) apply(r Row) {
	k := fileKey{r.ProductID, r.ID}
	if old, ok := s.rows[k]; ok && !Newer(&r, &old) {
		return
	}
	s.rows[k] = r
	ids := s.products[r.ProductID]
	if ids == nil {
		ids = map[int64]struct{}{}
		s.products[r.ProductID] = ids
	}
	ids[r.ID] = struct{}{}
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
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i := range rows {
		if err := enc.Encode(fileRowOf(&rows[i])); err != nil {
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
	if err := s.append(buf.Bytes()); err != nil {
		// Cut a partly written batch off, so that the next append does
		// not continue a torn line; the caller retries the batch.
		s.w.Reset(s.f)
		if terr := s.f.Truncate(s.size); terr == nil {
			_, _ = s.f.Seek(s.size, io.SeekStart)
		}
		return fmt.Errorf("orderstore: append: %w", err)
	}
	s.size += int64(buf.Len())
	for i := range rows {
		s.apply(rows[i])
	}
	return nil
}

func (s *File) append(b []byte) error {
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	if err := s.w.Flush(); err != nil {
		return err
	}
	return s.f.Sync()
}

// Get reads the newest row of one order.
func (s *File) Get(_ context.Context, productID string, orderID int64) (Row, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[fileKey{productID, orderID}]
	return r, ok, nil
}

// Totals counts one product's orders.
func (s *File) Totals(_ context.Context, productID string) (Totals, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t Totals
	users := map[string]int64{}
	for id := range s.products[productID] {
		r := s.rows[fileKey{productID, id}]
		switch r.Status {
		case StatusStored:
			t.Orders++
			t.Units += int64(r.Qty)
			users[r.UserID] += int64(r.Qty)
		case StatusReleased:
			t.ReleasedOrders++
			t.ReleasedUnits += int64(r.Qty)
		}
	}
	for u, n := range users {
		if n > t.MaxUserUnits || n == t.MaxUserUnits && u < t.MaxUser {
			t.MaxUser, t.MaxUserUnits = u, n
		}
	}
	return t, nil
}

// Buyers is the status-1 units per user of one product.
func (s *File) Buyers(_ context.Context, productID string) (map[string]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int64{}
	for id := range s.products[productID] {
		if r := s.rows[fileKey{productID, id}]; r.Status == StatusStored {
			out[r.UserID] += int64(r.Qty)
		}
	}
	return out, nil
}

// Statuses reads the status of the stored ones of orderIDs.
func (s *File) Statuses(_ context.Context, productID string, orderIDs []int64) (map[int64]uint8, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int64]uint8, len(orderIDs))
	for _, id := range orderIDs {
		if r, ok := s.rows[fileKey{productID, id}]; ok {
			out[id] = r.Status
		}
	}
	return out, nil
}

// Products lists the products with at least one row.
func (s *File) Products(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.products))
	for p := range s.products {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// Close closes the log; everything inserted is already synced.
func (s *File) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.f.Close()
}

var _ Store = (*File)(nil)
