package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"flashgate/conf"
)

// TestOpenOrderStoreFailsWithANilStore: ClickHouse unreachable, the store
// comes back as a nil interface, so that openPipeline's clean-up skips it.
// It held a nil *ClickHouse, whose Close panicked: an edge started while
// ClickHouse was down crashed (bench nemesis seed 108).
func TestOpenOrderStoreFailsWithANilStore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	doc, err := conf.Parse([]byte("clickhouse:\n  addr: \""+addr+"\"\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := doc.Config
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := OpenOrderStore(ctx, cfg, t.TempDir(), nil)
	if err == nil {
		st.Close()
		t.Fatal("OpenOrderStore on a closed port succeeded")
	}
	if st != nil {
		t.Fatalf("OpenOrderStore failed (%v) but returned a non-nil store %#v", err, st)
	}
	p := &pipeline{store: st}
	p.close() // must not panic
}
