package e2e

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flashgate/internal/kafkatest"
	"flashgate/internal/redistest"
	"flashgate/orders/orderstore"
)

// pushPipeline points an edge at the test's Kafka, with the consumer
// running outside the edge (as `proxy orders` does).
func pushPipeline(brokers []string) string {
	q := make([]string, len(brokers))
	for i, b := range brokers {
		q[i] = strconv.Quote(b)
	}
	return "kafka: {brokers: [" + strings.Join(q, ", ") + "]}\norders: {consumer: false}\n"
}

// TestPushEventsContract: the stream through a real edge's filter chain
// (signed sessions), from a real purchase to the outcome the real consumer
// stored: only the owner may listen, bad input gets its code, the limits
// hold against a flood, and every listener gets the outcome and the end.
func TestPushEventsContract(t *testing.T) {
	r := redistest.New(t)
	brokers, _ := kafkatest.Start(t)
	path := writeConfig(t, fmt.Sprintf("node_id: %d\nredis: {addr: %q}\n", nodeSeq.Add(1)%1000+1, r.Addr()),
		pushPipeline(brokers), "events: {max_per_user: 2}\n", activities(sale("ev", 100, 1)))
	e := servePushEdge(t, path)
	api := &edge{t: t, addr: e.addr, api: newAPIClient()}
	j := newJWTs(t, sessionSecret)

	res, err := api.attempt(j.get("alice"), "ev", 1)
	if err != nil || res.status != 200 {
		t.Fatalf("purchase: %v %v", res, err)
	}
	id := jsonStr(res.body, "orderId")
	n, _ := strconv.ParseInt(id, 10, 64)
	q := "orderId=" + id + "&productId=ev"

	for _, c := range []struct {
		name, query, jwt string
		status           int
		code             string
	}{
		{"no session", q, "", 401, "UNAUTHENTICATED"},
		{"forged session", q, newJWTs(t, otherSecret).get("alice"), 401, "UNAUTHENTICATED"},
		{"another shopper", q, j.get("bob"), 404, "NOT_FOUND"},
		{"unknown order", "orderId=" + strconv.FormatInt(n+1, 10) + "&productId=ev", j.get("alice"), 404, "NOT_FOUND"},
		{"wrong product", "orderId=" + id + "&productId=other", j.get("alice"), 404, "NOT_FOUND"},
		{"malformed id", "orderId=" + id + "x&productId=ev", j.get("alice"), 400, "BAD_REQUEST"},
		{"no product", "orderId=" + id, j.get("alice"), 400, "BAD_REQUEST"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := openPushStream(e.addr, c.query, c.jwt)
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			if s.status != c.status || jsonStr([]byte(s.body), "code") != c.code {
				t.Fatalf("got %d %s, want %d %s", s.status, s.body, c.status, c.code)
			}
		})
	}

	// Two tabs of the owner wait (max_per_user 2); a third is refused.
	var tabs []*pushStream
	for range 2 {
		s, err := openPushStream(e.addr, q, j.get("alice"))
		if err != nil || s.status != 200 {
			t.Fatalf("owner's stream: %v %v", s, err)
		}
		defer s.close()
		first, err := s.next(5 * time.Second)
		if err != nil || jsonStr([]byte(first), "status") != "pending" || !strings.Contains(first, `"orderId":"`+id+`"`) {
			t.Fatalf("first event %q %v", first, err)
		}
		tabs = append(tabs, s)
	}
	if s, _ := openPushStream(e.addr, q, j.get("alice")); s == nil || s.status != 429 || jsonStr([]byte(s.body), "code") != "RATE_LIMITED" {
		t.Fatalf("third stream of the owner: %+v", s)
	} else {
		s.close()
	}

	// A flood of stream requests for someone else's order: refused, and
	// nothing stays behind.
	var wg sync.WaitGroup
	var mu sync.Mutex
	answers := map[int]int{}
	for range 300 {
		wg.Go(func() {
			s, err := openPushStream(e.addr, q, j.get("mallory"))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				answers[-1]++
				return
			}
			s.close()
			answers[s.status]++
		})
	}
	wg.Wait()
	if answers[404]+answers[429] != 300 {
		t.Fatalf("flood answers %v, want only 404 and 429", answers)
	}
	if st := e.hub.Stats(); st.Open != 2 {
		t.Fatalf("after the flood %d streams are open, want the owner's 2: %+v", st.Open, st)
	}
	t.Logf("flood of 300 stream requests for another's order: %v", answers)

	// The consumer stores the order and publishes the batch: both tabs get
	// the outcome and the end.
	store, err := orderstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	pushConsumer(t, brokers, r.Addr(), store, nil)
	for i, s := range tabs {
		ev, err := s.next(10 * time.Second)
		if err != nil || jsonStr([]byte(ev), "status") != "success" || !strings.Contains(ev, `"orderId":"`+id+`"`) {
			t.Fatalf("tab %d: outcome %q %v", i, ev, err)
		}
		if ev, err := s.next(5 * time.Second); err != io.EOF {
			t.Fatalf("tab %d: after the outcome %q %v, want the end", i, ev, err)
		}
	}
	// A decided order is one event, at once, with nothing held.
	s, err := openPushStream(e.addr, q, j.get("alice"))
	if err != nil || s.status != 200 || jsonStr([]byte(s.body), "status") != "success" {
		t.Fatalf("stream of a decided order: %+v %v", s, err)
	}
	s.close()
	if !waitFor(time.Second, func() bool { return e.hub.Stats().Open == 0 }) {
		t.Fatalf("streams left open: %+v", e.hub.Stats())
	}
	if st := e.hub.Stats(); st.Pushes != 2 || st.RejectedUser < 1 {
		t.Fatalf("stats %+v", st)
	}
}
