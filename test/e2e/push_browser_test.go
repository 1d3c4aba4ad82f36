package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"flashgate/internal/kafkatest"
	"flashgate/internal/redistest"
	"flashgate/orders/orderstore"
)

const pushChromium = "/usr/bin/chromium"

// TestPushPageShowsSuccessWithoutPolling: the sale page in a real Chromium
// buys, listens on the event stream, and shows the success the consumer
// stored — without a single /api/seckill/result request.
func TestPushPageShowsSuccessWithoutPolling(t *testing.T) {
	if _, err := os.Stat(pushChromium); err != nil {
		t.Skipf("%s not found: apt-get install -y chromium", pushChromium)
	}
	r := redistest.New(t)
	brokers, _ := kafkatest.Start(t)
	path := writeConfig(t, fmt.Sprintf("node_id: %d\nredis: {addr: %q}\n", nodeSeq.Add(1)%1000+1, r.Addr()),
		pushPipeline(brokers), activities(sale("br", 10, 1)))
	e := servePushEdge(t, path)

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(pushChromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()))...)
	defer cancelAlloc()
	var mu sync.Mutex
	var urls []string
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithListener(func(ev any) {
		if req, ok := ev.(*network.EventRequestWillBeSent); ok {
			mu.Lock()
			urls = append(urls, req.Request.URL)
			mu.Unlock()
		}
	}))
	defer cancel()
	// The first action starts the browser; it must not carry a deadline,
	// whose end would close the browser with it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", pushChromium, err)
	}
	requested := func(s string) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, u := range urls {
			if strings.Contains(u, s) {
				n++
			}
		}
		return n
	}
	run := func(what string, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		if err := chromedp.Do(c, actions...); err != nil {
			msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById('message') || {}).textContent || ''`))
			t.Fatalf("%s: %v (message %q; requests %v)", what, err, msg, urls)
		}
	}
	poll := func(what, expr string, d time.Duration) {
		t.Helper()
		run(what, d+5*time.Second, chromedp.Poll[chromedp.Void](expr,
			chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(d)))
	}

	run("open the page", 20*time.Second, chromedp.Navigate("http://"+e.addr+"/seckill/br"))
	run("sign in", 10*time.Second,
		chromedp.WaitVisible(chromedp.ID("login-form")),
		chromedp.SendKeys(chromedp.ID("user-id"), "alice"),
		chromedp.Click(chromedp.ID("login-btn")))
	run("buy", 10*time.Second, chromedp.WaitEnabled(chromedp.ID("buy")), chromedp.Click(chromedp.ID("buy")))

	// The page listens; only then does the consumer store the order, so the
	// success can only come through the stream.
	if !waitFor(10*time.Second, func() bool { return e.hub.Stats().Open == 1 }) {
		t.Fatalf("no event stream opened; requests %v", urls)
	}
	store, err := orderstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	pushConsumer(t, brokers, r.Addr(), store, nil)

	poll("the page shows success", `/^Success! Order \d+ confirmed\.$/.test((document.getElementById('message') || {}).textContent || '')`, 10*time.Second)
	if n := requested("/api/seckill/events"); n != 1 {
		t.Errorf("%d event stream requests, want 1: %v", n, urls)
	}
	if n := requested("/api/seckill/result"); n != 0 {
		t.Errorf("%d result polls while the stream worked, want none: %v", n, urls)
	}
	if st := e.hub.Stats(); st.Pushes != 1 || st.Open != 0 {
		t.Errorf("hub %+v", st)
	}
}
