package stock

import (
	"context"
	"testing"
	"time"
)

func TestSoldOutBroadcast(t *testing.T) {
	a, srv := openReal(t, Options{})
	b, err := Open(context.Background(), srv.Addr(), testOptions(Options{Timeout: testBudget}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	testBroadcast(t, a, b, srv.Restart)
}

type flag struct {
	product string
	soldOut bool
}

// testBroadcast: b publishes, a's subscribers (two of them, one Redis
// subscription on the keyless channel) see it; after restart (if given)
// the subscription comes back and reports Missed.
func testBroadcast(t *testing.T, a, b *Store, restart func()) {
	if a.Sharded() || b.Sharded() {
		t.Fatal("sharded pub/sub on a standalone server") // one keyless channel there
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ch1, ch2 := make(chan flag, 16), make(chan flag, 16)
	// Missed is reported as product "".
	follow := func(ch chan flag) Follow {
		return Follow{Missed: func(context.Context) { ch <- flag{"", false} }}
	}
	stop1 := a.SubscribeSoldOut(ctx, follow(ch1), func(p string, so bool) { ch1 <- flag{p, so} }).Stop
	stop2 := a.SubscribeSoldOut(ctx, follow(ch2), func(p string, so bool) { ch2 <- flag{p, so} }).Stop
	defer stop2()
	expect := func(ch chan flag, want flag) {
		t.Helper()
		for {
			select {
			case got := <-ch:
				if got.product == "" && want.product != "" {
					continue // resync hints may come at any (re)subscription
				}
				if got != want {
					t.Fatalf("got %+v, want %+v", got, want)
				}
				return
			case <-ctx.Done():
				t.Fatalf("no broadcast %+v", want)
			}
		}
	}
	expect(ch1, flag{"", false}) // subscribed
	if err := b.PublishSoldOut(ctx, "p1", true); err != nil {
		t.Fatal(err)
	}
	expect(ch1, flag{"p1", true})
	expect(ch2, flag{"p1", true})
	if err := b.PublishSoldOut(ctx, "p1", false); err != nil {
		t.Fatal(err)
	}
	expect(ch1, flag{"p1", false})
	expect(ch2, flag{"p1", false})
	stop1()
	if err := b.PublishSoldOut(ctx, "p2", true); err != nil {
		t.Fatal(err)
	}
	expect(ch2, flag{"p2", true})
	select {
	case f := <-ch1:
		if f.product != "" {
			t.Fatalf("stopped subscriber got %+v", f)
		}
	default:
	}
	if restart == nil {
		return
	}
	restart()
	expect(ch2, flag{"", false}) // resubscribed after the reconnect
	// b's own connection reconnects on its next call; retry until it does.
	for ctx.Err() == nil && b.PublishSoldOut(ctx, "p3", true) != nil {
	}
	expect(ch2, flag{"p3", true})
}
