package orderstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"flashgate/orders/order"
	"flashgate/orders/orderid"
)

// TestAppendFileRowMatchesJSON: the hand-written line of a valid row is
// the one encoding/json wrote (json.Encoder, newline included), every
// field's extremes and the omitted ones among them.
func TestAppendFileRowMatchesJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 26))
	products := []string{"p1", "a-b_c", "P", strings.Repeat("p", order.MaxProductIDLen)}
	users := []string{"alice", "u.s@e-r_1", "U", strings.Repeat("u", order.MaxUserIDLen)}
	ids := []int64{1, 120850008860790784, 1<<63 - 1}
	prices := []int64{0, 1, 9900, maxPriceCents - 1}
	times := []int64{1, 1796038487397, 4294967295999}
	checked := 0
	for range 20000 {
		created := times[rng.IntN(len(times))]
		r := Row{Order: order.Order{ID: ids[rng.IntN(len(ids))], ProductID: products[rng.IntN(len(products))], UserID: users[rng.IntN(len(users))],
			Qty: order.MinQty + rng.IntN(order.MaxQty-order.MinQty+1), PriceCents: prices[rng.IntN(len(prices))], CreatedMs: created,
			Edge: rng.IntN(orderid.MaxNode + 1)},
			Status: uint8(rng.IntN(3)), UpdatedMs: times[rng.IntN(len(times))]}
		if rng.IntN(2) == 0 {
			r.PayByMs = created + 1 + rng.Int64N(1<<40)
		}
		switch r.Status {
		case StatusPaid:
			r.PaidMs = times[rng.IntN(len(times))]
		case StatusCancelled:
			r.Expired = rng.IntN(2) == 0
		}
		if r.Validate() != nil {
			continue
		}
		checked++
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(fileRowOf(&r)); err != nil {
			t.Fatal(err)
		}
		got, err := appendFileRow([]byte("x"), &r)
		if err != nil || string(got) != "x"+want.String() {
			t.Fatalf("appendFileRow(%+v) = %q, %v; encoding/json: %q", r, got, err, want.String())
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d valid rows checked", checked)
	}
}

// BenchmarkInsert: Insert of batches of 500 rows of 8 products into the
// file store (encode, append, one fsync, the in-memory view) and into a
// database of the test's clickhouse-server, CPU of this process per row
// (the fsync's wait and ClickHouse's work are not in it). Old and new test
// binaries alternating:
//
//	go test -c -o /tmp/new.test ./orders/orderstore/ && cd orders/orderstore &&
//	for i in 1 2 3; do /tmp/old.test -test.run '^$' -test.bench Insert -test.benchtime 200000x -test.cpu 1;
//	/tmp/new.test -test.run '^$' -test.bench Insert -test.benchtime 200000x -test.cpu 1; done
func BenchmarkInsert(b *testing.B) {
	b.Run("file", func(b *testing.B) {
		s, err := OpenFile(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		benchInsert(b, s)
	})
	b.Run("clickhouse", func(b *testing.B) { benchInsert(b, openCH(b, fmt.Sprintf("bench_insert_%d", time.Now().UnixNano()))) })
}

func benchInsert(b *testing.B, s Store) {
	ctx := context.Background()
	rows := make([]Row, 0, 500)
	id := time.Now().UnixNano()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for lo := 0; lo < b.N; lo += cap(rows) {
		rows = rows[:0]
		for i := range min(cap(rows), b.N-lo) {
			id++
			rows = append(rows, Row{Order: order.Order{ID: id, ProductID: "bench" + string(rune('a'+i%8)), UserID: "user" + string(rune('a'+i%26)),
				Qty: 1, PriceCents: 9900, CreatedMs: 1796038487397, Edge: 1, PayByMs: 1796038497397}, UpdatedMs: 1796038487397})
		}
		if err := s.Insert(ctx, rows); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/row")
}
