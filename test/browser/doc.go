// Package browser holds the end-to-end tests that drive the sale page and
// the ops dashboard in a real headless Chromium (Debian's /usr/bin/chromium,
// through chromedp), against an edge started in-process on loopback with a
// real redis-server and the embedded Kafka and order store.
//
// They check what only a browser can: that a shopper sees plain words
// (never a JSON dump) for every outcome, that the countdown follows the
// server's clock and not the device's, that the page falls back to polling
// when the result stream is missing, that a phone gets a page that fits
// and loads nothing from anyone else, and that the dashboard moves when
// orders come in.
//
// The package has no code of its own: everything is in the _test.go files.
// One Chromium process serves every test (TestMain); each test gets its own
// browser context (cookies, storage), tab and edge, so tests run in parallel.
// A failing test saves a full-page screenshot and logs its path.
//
// Install the browser with: apt-get install -y chromium
package browser
