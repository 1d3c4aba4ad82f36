package push_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"flashgate/conf"
	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/orders/stock"
	"flashgate/sale/push"
)

// On Redis Cluster each product's outcomes ride on its own node. While the
// master of product a's slot is dead, the pushes of product b (another
// master) keep flowing; once a replica took over, a's are back, and an
// outcome whose message was lost during the outage reaches its stream when
// the hub resubscribes, not at the stream's (minute-long) deadline.
func TestPushOnClusterSurvivesFailover(t *testing.T) {
	c := redistest.NewCluster(t)
	e := newEnv(t, envOpts{cluster: c.Addrs(), events: func(ev *conf.EventsConfig) { ev.Deadline = time.Minute }})
	if !e.st.Sharded() {
		t.Fatal("a Store on a cluster does not use sharded pub/sub")
	}
	a, b := productsOnTwoMasters(t, c) // a on the master of slot 0
	masterA, masterB := c.MasterOf(stock.StockKey(a)), c.MasterOf(stock.StockKey(b))

	lost, live, during := nextID(), nextID(), nextID()
	e.order(a, lost, "u1", stock.StatePending)
	e.order(a, live, "u2", stock.StatePending)
	e.order(b, during, "u3", stock.StatePending)
	sLost, sLive, sDuring := open(t, e.addr, a, lost, "u1"), open(t, e.addr, a, live, "u2"), open(t, e.addr, b, during, "u3")
	for _, s := range []*sse{sLost, sLive, sDuring} {
		if got := status(s.mustNext()); got != "pending" {
			t.Fatalf("first event %q, want pending", got)
		}
	}
	// The hub follows the products its streams wait for, each on the node
	// that serves the product's slot.
	await.Until(t, 10*time.Second, "the hub subscribed to a's and b's channels on their masters", func() bool {
		return shardSubscribers(t, e.raw, masterA, stock.ChangesChannelOf(a)) == 1 &&
			shardSubscribers(t, e.raw, masterB, stock.ChangesChannelOf(b)) == 1
	})

	publish := func(product string, id int64) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return e.st.PublishStored(ctx, map[string][]int64{product: {id}})
	}
	// lost is stored (and its state replicated) but its message is never
	// delivered: the consumer publishes it while a's master is dead.
	setReplicated(t, e.raw, stock.OrderKey(a, lost), stock.StateSuccess)
	c.Kill(masterA)
	killed := time.Now()
	if err := publish(a, lost); err == nil {
		t.Fatal("publishing to a's dead master succeeded")
	}
	// Meanwhile b's outcomes reach their streams.
	if err := publish(b, during); err != nil {
		t.Fatalf("b's outcome during a's outage: %v", err)
	}
	mustContain(t, sDuring.mustNext(), `"status":"success"`, `"orderId":"`+strconv.FormatInt(during, 10)+`"`)
	sDuring.end()

	newA := c.AwaitMaster(stock.StockKey(a), masterA, 30*time.Second)
	// The hub resubscribes a's channel on its new master and re-reads the
	// states of its streams: lost is settled without another message.
	mustContain(t, sLost.mustNext(), `"status":"success"`, `"orderId":"`+strconv.FormatInt(lost, 10)+`"`)
	sLost.end()
	t.Logf("the lost outcome reached its stream %v after the kill", time.Since(killed).Round(time.Millisecond))
	if st := e.hub.Stats(); st.Resyncs < 1 {
		t.Fatalf("no resync after the failover: %+v", st)
	}

	// a's live flow is back: a message alone (the state in Redis is still
	// pending) settles live.
	await.Until(t, 10*time.Second, "the hub subscribed to a's channel on its new master", func() bool {
		return shardSubscribers(t, e.raw, newA, stock.ChangesChannelOf(a)) == 1
	})
	if err := publish(a, live); err != nil {
		t.Fatalf("a's outcome after the failover: %v", err)
	}
	mustContain(t, sLive.mustNext(), `"status":"success"`, `"orderId":"`+strconv.FormatInt(live, 10)+`"`)
	sLive.end()
	e.waitStats(time.Second, "every stream closed", func(st push.Stats) bool { return st.Open == 0 && st.Deadlines == 0 })
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
		switch m := c.MasterOf(stock.StockKey(p)); {
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
// many connections there subscribe to it.
func shardSubscribers(t testing.TB, c rueidis.Client, addr, channel string) int64 {
	t.Helper()
	node, ok := c.Nodes()[addr]
	if !ok {
		return -1 // not known to the client (yet)
	}
	arr, err := node.Do(context.Background(), node.B().PubsubShardnumsub().Channel(channel).Build()).ToArray()
	if err != nil || len(arr) != 2 {
		return -1
	}
	n, _ := arr[1].AsInt64()
	return n
}

// setReplicated sets an order's state (a lost message: nobody is told)
// and waits until a replica of its master has it, so that the failover
// keeps it.
func setReplicated(t testing.TB, c rueidis.Client, key, state string) {
	t.Helper()
	ctx := context.Background()
	err := c.Dedicated(func(d rueidis.DedicatedClient) error {
		res := d.DoMulti(ctx,
			d.B().Hset().Key(key).FieldValue().FieldValue("state", state).Build(),
			d.B().Wait().Numreplicas(1).Timeout(5000).Build())
		if err := res[0].Error(); err != nil {
			return err
		}
		if n, err := res[1].AsInt64(); err != nil || n < 1 {
			t.Fatalf("WAIT 1: %d replicas, %v", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
