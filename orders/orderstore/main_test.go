package orderstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"flashgate/internal/chtest"
)

// ch is one clickhouse-server shared by the package's tests; each test
// gets its own database.
var ch *chtest.Server

func TestMain(m *testing.M) { chtest.Main(m, &ch) }

var dbSeq atomic.Int64

func freshDB() string { return fmt.Sprintf("t%d", dbSeq.Add(1)) }

func openCH(t testing.TB, db string) *ClickHouse {
	t.Helper()
	s, err := OpenClickHouse(context.Background(), ch.Addr(), db, ClickHouseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
