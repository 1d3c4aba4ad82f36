// Package dashboard is the operator's view of one edge: a page on the admin
// listener that shows, second by second, the sale (stock left, sold,
// purchase attempts per second), the filter chain (rejections per second),
// the order pipeline (outbox, Kafka lag, stored, dead-lettered) and the
// edge's state (breaker, degrade switch, last reload), and that drives the
// admin calls (activities, restock, degrade, cancel, reload) from forms.
// Sales with a waiting room get a panel of their own (waiting, admitted,
// active, rate, ETA, paused or closed), which the page reads from the
// admin listener's GET /admin/waitroom and whose pause, resume, rate and
// close buttons post to POST /admin/waitroom.
//
// The charts (site/charts.js) draw the last 15 minutes at 1 s from the
// edge's History, a fixed ring the edge fills once a second (GET
// /admin/dashboard/history), with markers for the moments that explain a
// line (a breaker, a fence and its recovery, a reload, the degrade switch).
//
// The package knows nothing about how those numbers are produced: the edge
// hands New a function that fills a Snapshot, called once per JSON request
// and once per second per event stream, and the History it fills. The page is plain JS and CSS,
// embedded and served from memory (ETag, gzip) under a self-only CSP, so an
// on-call engineer gets it from any edge without a build step or a CDN.
//
// Authorization is the caller's: it checks the admin token before calling
// Serve for data paths. The page and its assets carry no data (IsPublic) and
// must load without a token, since a browser navigating to the page cannot
// send one; the page then sends the token it is given on its own calls.
package dashboard
