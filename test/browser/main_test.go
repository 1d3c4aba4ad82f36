package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// chromePath is Debian's chromium; scripts/test.sh installs it.
const chromePath = "/usr/bin/chromium"

// browserCtx is the one Chromium every test opens its tabs in.
var browserCtx context.Context

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	if _, err := os.Stat(chromePath); err != nil {
		fmt.Fprintf(os.Stderr, "browser tests: %s not found: apt-get install -y chromium\n", chromePath)
		return 1
	}
	dir, err := os.MkdirTemp("", "flashgate-chromium-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromePath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(dir),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil { // starts the browser, with no deadline
		fmt.Fprintf(os.Stderr, "browser tests: start %s: %v\n", chromePath, err)
		return 1
	}
	browserCtx = ctx
	return m.Run()
}

// recorder runs in every document before the page's own scripts. It keeps
// the history of what a shopper saw, so a test can assert on a message that
// was on screen only for a moment ("Queued …") without racing the page:
//
//	__fg.msgs      every distinct text of #message, in order
//	__fg.buttons   every distinct state of #buy ("on:Buy now", "off:Sold out")
//	__fg.enabledAt true wall-clock ms when #buy first turned on (performance
//	               clock: immune to a Date.now override)
//	__fg.id        a random id of this document: unchanged = no reload
const recorder = `(function () {
  var fg = window.__fg = { msgs: [], buttons: [], enabledAt: 0, id: Math.random() };
  function wallNow() { return performance.timeOrigin + performance.now(); }
  function watch() {
    var m = document.getElementById('message'), b = document.getElementById('buy');
    if (!m || !b) return;
    function rec() {
      var t = m.textContent;
      if (t && fg.msgs[fg.msgs.length - 1] !== t) fg.msgs.push(t);
      var s = (b.disabled ? 'off:' : 'on:') + b.textContent;
      if (fg.buttons[fg.buttons.length - 1] !== s) fg.buttons.push(s);
      if (!b.disabled && !fg.enabledAt) fg.enabledAt = wallNow();
    }
    new MutationObserver(rec).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
    rec();
  }
  document.addEventListener('DOMContentLoaded', watch);
})();`

// tab is one page in its own browser context (own cookies and storage).
type tab struct {
	t    *testing.T
	name string
	ctx  context.Context

	mu      sync.Mutex
	reqs    []*netReq
	byID    map[network.RequestID]*netReq
	changed chan struct{} // closed (and replaced) on every network event
}

// netReq is what the tab saw of one request.
type netReq struct {
	ID       network.RequestID
	URL      string
	Method   string
	Type     network.ResourceType
	Status   int64
	MIME     string
	Encoding string // Content-Encoding of the answer
	Encoded  float64
	Finished bool
	Failed   string // errorText of a failed load
	Blocked  bool
}

// newTab opens a tab in a fresh browser context. Every network event of the
// tab is recorded from the start. On failure a full-page screenshot is
// saved and its path logged.
func newTab(t *testing.T, name string) *tab {
	t.Helper()
	b := &tab{t: t, name: name, byID: map[network.RequestID]*netReq{}, changed: make(chan struct{})}
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext(), chromedp.WithListener(b.onEvent))
	t.Cleanup(cancel)
	b.ctx = ctx
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("%s: open tab: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if path := b.screenshot("fail"); path != "" {
				t.Logf("%s: screenshot of the failure: %s", name, path)
			}
		}
	})
	b.initScript(recorder)
	return b
}

func (b *tab) onEvent(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer func() {
		close(b.changed)
		b.changed = make(chan struct{})
	}()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		r := &netReq{ID: ev.RequestID, URL: ev.Request.URL, Method: ev.Request.Method, Type: ev.Type}
		b.reqs = append(b.reqs, r)
		b.byID[ev.RequestID] = r
	case *network.EventResponseReceived:
		if r := b.byID[ev.RequestID]; r != nil && ev.Response != nil {
			r.Status, r.MIME = ev.Response.Status, ev.Response.MimeType
			for k, v := range ev.Response.Headers {
				if strings.EqualFold(k, "Content-Encoding") {
					r.Encoding = fmt.Sprint(v)
				}
			}
		}
	case *network.EventLoadingFinished:
		if r := b.byID[ev.RequestID]; r != nil {
			r.Encoded, r.Finished = ev.EncodedDataLength, true
		}
	case *network.EventLoadingFailed:
		if r := b.byID[ev.RequestID]; r != nil {
			r.Failed, r.Blocked = ev.ErrorText, ev.BlockedReason != ""
			if r.Failed == "" {
				r.Failed = "failed"
			}
		}
	}
}

// requests returns copies of the recorded requests from index from on.
func (b *tab) requests(from int) []netReq {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]netReq, 0, len(b.reqs))
	for _, r := range b.reqs[min(from, len(b.reqs)):] {
		out = append(out, *r)
	}
	return out
}

// waitNet waits until cond holds for the recorded requests, re-checking on
// every network event of the tab.
func (b *tab) waitNet(d time.Duration, what string, cond func([]netReq) bool) {
	b.t.Helper()
	timeout := time.After(d)
	for {
		b.mu.Lock()
		ch := b.changed
		b.mu.Unlock()
		if cond(b.requests(0)) {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			b.t.Fatalf("%s: waited %v for %s\n%s", b.name, d, what, b.state())
		}
	}
}

// mark is the index of the next request to be recorded.
func (b *tab) mark() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.reqs)
}

// countReqs counts the recorded requests whose URL contains s.
func (b *tab) countReqs(from int, s string) int {
	n := 0
	for _, r := range b.requests(from) {
		if strings.Contains(r.URL, s) {
			n++
		}
	}
	return n
}

// initScript runs src in every document of the tab before its scripts.
func (b *tab) initScript(src string) {
	b.t.Helper()
	b.call(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: src})
		return err
	})
}

// call runs a protocol-level step on the tab, failing the test on error.
func (b *tab) call(f func(ctx context.Context, t *chromedp.Target) error) {
	b.t.Helper()
	b.do(chromedp.Func(f))
}

// do runs actions with a deadline, failing the test on error.
func (b *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\n%s", b.name, err, b.state())
	}
}

// open navigates and waits for the page's load event.
func (b *tab) open(url string) {
	b.t.Helper()
	b.do(chromedp.Navigate(url))
}

// block makes the tab fail every request whose URL matches one of the
// URLPattern strings (e.g. "*://*:*/api/seckill/events*"); none = unblock.
func (b *tab) block(patterns ...string) {
	b.t.Helper()
	ps := make([]*network.BlockPattern, 0, len(patterns))
	for _, p := range patterns {
		ps = append(ps, &network.BlockPattern{URLPattern: p, Block: true})
	}
	b.call(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, network.SetBlockedURLs, network.SetBlockedURLsParams{URLPatterns: ps})
		return err
	})
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *tab, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("%s: evaluate %s: %v", b.name, expr, err)
	}
	return v
}

// text is the textContent of the element with this id.
func (b *tab) text(id string) string {
	b.t.Helper()
	return eval[string](b, `(document.getElementById(`+jsString(id)+`) || {}).textContent || ''`)
}

// waitJS polls a JavaScript predicate every 50 ms until it is truthy, and
// fails the test with what the page shows when d passes first.
func (b *tab) waitJS(d time.Duration, what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(d)))
	if err != nil {
		b.t.Fatalf("%s: waited %v for %s: %v\n%s", b.name, d, what, err, b.state())
	}
}

// waitText waits until the element's text matches re.
func (b *tab) waitText(d time.Duration, id string, re *regexp.Regexp) string {
	b.t.Helper()
	b.waitJS(d, fmt.Sprintf("#%s to match %s", id, re), `(function () {
  var n = document.getElementById(`+jsString(id)+`);
  return !!n && new RegExp(`+jsString(re.String())+`).test(n.textContent);
})()`)
	return b.text(id)
}

// buyState is the Buy button as a shopper sees it.
type buyState struct {
	Text    string `json:"text"`
	Enabled bool   `json:"enabled"`
	Visible bool   `json:"visible"`
}

func (b *tab) buy() buyState {
	b.t.Helper()
	return eval[buyState](b, `(function () {
  var n = document.getElementById('buy');
  return { text: n.textContent, enabled: !n.disabled, visible: n.offsetParent !== null };
})()`)
}

// waitBuy waits for the Buy button to say text (a regexp) and be on or off.
func (b *tab) waitBuy(d time.Duration, text string, enabled bool) {
	b.t.Helper()
	b.waitJS(d, fmt.Sprintf("#buy %q enabled=%v", text, enabled), `(function () {
  var n = document.getElementById('buy');
  return !!n && n.disabled === `+fmt.Sprint(!enabled)+` && new RegExp(`+jsString(text)+`).test(n.textContent);
})()`)
}

// history returns what the recorder saw of #message and #buy.
func (b *tab) history() (msgs, buttons []string) {
	b.t.Helper()
	h := eval[struct {
		Msgs    []string `json:"msgs"`
		Buttons []string `json:"buttons"`
	}](b, `({ msgs: (window.__fg || {}).msgs || [], buttons: (window.__fg || {}).buttons || [] })`)
	return h.Msgs, h.Buttons
}

// signIn signs in through the form and waits for the page to show the user.
func (b *tab) signIn(user string) {
	b.t.Helper()
	b.do(
		chromedp.WaitVisible(chromedp.ID("login-form")),
		chromedp.SendKeys(chromedp.ID("user-id"), user),
		chromedp.Click(chromedp.ID("login-btn")),
	)
	b.waitJS(5*time.Second, "signed in as "+user, `(function () {
  var u = document.getElementById('user');
  return !u.hidden && u.textContent.indexOf(`+jsString(user)+`) >= 0 && document.getElementById('login-form').hidden;
})()`)
}

// clickBuy presses Buy (which must be on).
func (b *tab) clickBuy() {
	b.t.Helper()
	b.do(chromedp.WaitEnabled(chromedp.ID("buy")), chromedp.Click(chromedp.ID("buy")))
}

// state describes what the page shows, for failure messages.
func (b *tab) state() string {
	ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(function () {
  function t(id) { var n = document.getElementById(id); return n ? JSON.stringify(n.textContent) + (n.disabled ? ' (disabled)' : '') + (n.hidden ? ' (hidden)' : '') : '-'; }
  var fg = window.__fg || {};
  return location.href + '\n  status ' + t('status') + ' countdown ' + t('countdown') + ' buy ' + t('buy') +
    '\n  message ' + t('message') + ' order ' + t('order-id') + ' user ' + t('user') +
    '\n  messages seen ' + JSON.stringify(fg.msgs || []) + '\n  buttons seen ' + JSON.stringify(fg.buttons || []);
})()`))
	if err != nil {
		return "  (page state unavailable: " + err.Error() + ")"
	}
	return "  " + s
}

var shotDir = sync.OnceValue(func() string {
	d := os.Getenv("BROWSER_SHOTS")
	if d == "" {
		d = filepath.Join(os.TempDir(), "flashgate-browser-shots")
	}
	os.MkdirAll(d, 0o755)
	return d
})

// keepShot saves a screenshot when BROWSER_SHOTS names a directory, for a
// person to look at the pages (go test ./browser/ with BROWSER_SHOTS=/tmp/x).
func (b *tab) keepShot(label string) {
	b.t.Helper()
	if os.Getenv("BROWSER_SHOTS") == "" {
		return
	}
	if path := b.screenshot(label); path != "" {
		b.t.Logf("%s: screenshot %s", b.name, path)
	}
}

// screenshot saves a full-page PNG and returns its path ("" on error).
func (b *tab) screenshot(label string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("%s: screenshot: %v", b.name, err)
		return ""
	}
	name := regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(b.t.Name()+"-"+b.name+"-"+label, "_")
	path := filepath.Join(shotDir(), fmt.Sprintf("%s-%d.png", name, time.Now().UnixMilli()))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Logf("%s: screenshot: %v", b.name, err)
		return ""
	}
	return path
}

func jsString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}
