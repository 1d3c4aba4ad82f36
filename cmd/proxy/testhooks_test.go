package main

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"flashgate/proxy"
)

func TestTestHooksOffsetTheClockAndMapDials(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var opts proxy.Options
	if err := testHooks(&opts, 0, "", log); err != nil || opts.Now != nil || opts.TestRedisDial != nil {
		t.Fatalf("no test flags changed the options: %v %v", err, opts)
	}
	if err := testHooks(&opts, -2*time.Second, "127.0.0.1:7000=127.0.0.1:9000, 127.0.0.1:7001=127.0.0.1:9001", log); err != nil {
		t.Fatal(err)
	}
	before := time.Now().UnixNano()
	got := opts.Now()
	after := time.Now().UnixNano()
	if got < before-int64(2*time.Second) || got > after-int64(2*time.Second) {
		t.Fatalf("Now() = %d, want the wall clock 2 s behind (%d..%d)", got, before-int64(2*time.Second), after-int64(2*time.Second))
	}
	if opts.TestRedisDial["127.0.0.1:7001"] != "127.0.0.1:9001" || len(opts.TestRedisDial) != 2 {
		t.Fatalf("dial map %v", opts.TestRedisDial)
	}
	for _, bad := range []string{"127.0.0.1:7000", "a=b", "127.0.0.1:7000=127.0.0.1:1,127.0.0.1:7000=127.0.0.1:2"} {
		if err := testHooks(&proxy.Options{}, 0, bad, log); err == nil {
			t.Errorf("-test-redis-dial %q accepted", bad)
		}
	}
	if err := testHooks(&proxy.Options{}, 2*time.Hour, "", log); err == nil {
		t.Error("-test-clock-offset 2h accepted")
	}
}
