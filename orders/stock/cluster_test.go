package stock

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
)

// On Redis Cluster the broadcasts ride on each product's own node, the
// subscriptions follow the product list as it changes, and a dead master
// silences only its own products, until a replica took over: then they
// resubscribe by themselves and say so (Missed).
func TestShardedBroadcastsOnCluster(t *testing.T) {
	c := redistest.NewCluster(t)
	s, err := Open(context.Background(), strings.Join(c.Addrs(), ","), testOptions(Options{Timeout: 2 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Sharded() {
		t.Fatal("a Store on a cluster does not use sharded pub/sub")
	}
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: c.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	a, b := productsOnTwoMasters(t, c) // a on the master of slot 0
	cp := "pc"                         // added at run time
	masterA, masterB, masterC := c.MasterOf(StockKey(a)), c.MasterOf(StockKey(b)), c.MasterOf(StockKey(cp))

	var mu sync.Mutex
	products := []string{a, b}
	list := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(products) }
	var missed atomic.Int64
	flags := make(chan flag, 64)
	settled := make(chan string, 64) // product:ids
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	so := s.SubscribeSoldOut(ctx, Follow{Products: list, Missed: func(context.Context) { missed.Add(1) }},
		func(p string, v bool) { flags <- flag{p, v} })
	defer so.Stop()
	st := s.SubscribeChanges(ctx, Follow{Products: list}, func(m StateChange) {
		settled <- m.ProductID + ":" + strconv.FormatInt(m.OrderIDs[0], 10)
	}, func(msg string) { t.Errorf("malformed %q", msg) })
	defer st.Stop()
	if !so.Established() || !st.Established() {
		t.Fatal("subscriptions not established when Subscribe returned")
	}
	// One subscriber per product channel, on the node of its slot.
	for _, ch := range []struct{ node, name string }{
		{masterA, SoldOutChannelOf(a)}, {masterA, ChangesChannelOf(a)},
		{masterB, SoldOutChannelOf(b)}, {masterB, ChangesChannelOf(b)},
	} {
		if n := shardSubscribers(raw, ch.node, ch.name); n != 1 {
			t.Fatalf("%s on %s: %d subscribers, want 1", ch.name, ch.node, n)
		}
	}

	pub := func(p string, id int64) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := s.PublishSoldOut(ctx, p, true); err != nil {
			return err
		}
		return s.PublishStored(ctx, map[string][]int64{p: {id}})
	}
	expect := func(p string, id int64) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for gotFlag, gotSettled := false, false; !gotFlag || !gotSettled; {
			select {
			case f := <-flags:
				gotFlag = gotFlag || f == flag{p, true}
			case m := <-settled:
				gotSettled = gotSettled || m == p+":"+strconv.FormatInt(id, 10)
			case <-timeout:
				t.Fatalf("%s: broadcast or outcome %d not received", p, id)
			}
		}
	}
	for i, p := range []string{a, b} {
		if err := pub(p, int64(100+i)); err != nil {
			t.Fatal(err)
		}
		expect(p, int64(100+i))
	}

	// A sale added at run time is followed (and told it may have missed
	// something); one removed is unsubscribed.
	before := missed.Load()
	mu.Lock()
	products = append(products, cp)
	mu.Unlock()
	so.Refollow()
	st.Refollow()
	await.Until(t, 5*time.Second, "the new product followed", func() bool {
		return so.Established() && st.Established() && shardSubscribers(raw, masterC, SoldOutChannelOf(cp)) == 1
	})
	await.Until(t, 5*time.Second, "Missed after following a product", func() bool { return missed.Load() > before })
	if err := pub(cp, 200); err != nil {
		t.Fatal(err)
	}
	expect(cp, 200)
	mu.Lock()
	products = products[:2]
	mu.Unlock()
	so.Refollow()
	st.Refollow()
	await.Until(t, 5*time.Second, "the removed product unsubscribed", func() bool {
		return shardSubscribers(raw, masterC, SoldOutChannelOf(cp)) == 0 && shardSubscribers(raw, masterC, ChangesChannelOf(cp)) == 0
	})

	// a's master dies: a's broadcasts fail, b's keep flowing.
	c.Kill(masterA)
	if err := pub(a, 300); err == nil {
		t.Fatal("publishing to a's dead master succeeded")
	}
	if err := pub(b, 301); err != nil {
		t.Fatalf("b during a's outage: %v", err)
	}
	expect(b, 301)
	before = missed.Load()

	// A replica takes over: a's subscriptions come back by themselves and
	// report that broadcasts may have been missed.
	c.AwaitMaster(StockKey(a), masterA, 30*time.Second)
	await.Until(t, 15*time.Second, "a resubscribed after the failover", func() bool {
		return so.Established() && st.Established() && missed.Load() > before
	})
	if err := pub(a, 302); err != nil {
		t.Fatalf("a after the failover: %v", err)
	}
	expect(a, 302)
}

// productsOnTwoMasters returns two product ids whose slots different
// masters serve; a's master also serves slot 0, where a client sends a
// keyless PUBLISH (rueidis does): with plain pub/sub its death silenced
// every product.
func productsOnTwoMasters(t testing.TB, c *redistest.Cluster) (a, b string) {
	t.Helper()
	const slot0Key = "k596" // CLUSTER KEYSLOT k596 is 0
	first := c.MasterOf(slot0Key)
	for i := 0; i < 256 && (a == "" || b == ""); i++ {
		p := "p" + strconv.Itoa(i)
		switch m := c.MasterOf(StockKey(p)); {
		case m == first && a == "":
			a = p
		case m != first && b == "":
			b = p
		}
	}
	if a == "" || b == "" {
		t.Fatalf("no products on two masters: %q %q", a, b)
	}
	return a, b
}

// shardSubscribers is PUBSUB SHARDNUMSUB channel on the node at addr: how
// many connections there subscribe to it (-1: the node does not answer).
func shardSubscribers(c rueidis.Client, addr, channel string) int64 {
	node, ok := c.Nodes()[addr]
	if !ok {
		return -1
	}
	arr, err := node.Do(context.Background(), node.B().PubsubShardnumsub().Channel(channel).Build()).ToArray()
	if err != nil || len(arr) != 2 {
		return -1
	}
	n, _ := arr[1].AsInt64()
	return n
}

// An edge started while a cluster node is down opens (the other masters'
// products can sell) and names the node it cannot reach.
func TestUnreachableNamesTheDeadClusterNode(t *testing.T) {
	c := redistest.NewCluster(t)
	dead := c.MasterOf("k596")
	c.Kill(dead)
	s, err := Open(context.Background(), strings.Join(c.Addrs(), ","), testOptions(Options{Timeout: time.Second}))
	if err != nil {
		t.Fatalf("Open with one master down: %v", err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	errs := s.Unreachable(ctx)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), dead) {
		t.Fatalf("Unreachable = %v, want one error naming %s", errs, dead)
	}
}
