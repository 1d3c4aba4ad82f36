// Package static serves the flash-sale page: one HTML page, its script, style
// sheet and icon, and the waiting room's proof-of-work worker (pow.js),
// embedded in the binary (or read from a directory while the page is being
// designed).
//
// Every response is prepared when the Handler is built — content type, a
// strong ETag from the content's hash, a gzip copy at the best compression —
// because at the start of a sale a million shoppers load the same few files
// in the same second. Serving is then a few header copies and a pointer to
// bytes already in memory: no allocation, no file system, no compression per
// request. Revalidation (If-None-Match) answers 304 without a body, which is
// what keeps the "no-cache" page cheap.
//
// The page talks only to the edge's own sale API (README's shopper API) and loads
// nothing from third parties; its Content-Security-Policy enforces that.
//
// Routes, for the edge's router:
//
//	GET /seckill/{productId}        -> ServePage (same HTML for every product)
//	GET /seckill/_static/{name}     -> ServeAsset
//
// Product ids start with an alphanumeric character (order.ValidProductID),
// so "_static" can never be one.
package static
