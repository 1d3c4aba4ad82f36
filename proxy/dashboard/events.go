package dashboard

import (
	"bufio"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/sale/api"
)

// The dashboard's own 503s: the catalogue's DEGRADED, pointing at the
// polling URL; built once.
var (
	errShuttingDown   = api.Busy.WithMessage("shutting down; poll " + PathJSON)
	errTooManyStreams = api.Busy.WithMessage("too many dashboard streams; poll " + PathJSON)
)

// serveEvents streams the snapshot as Server-Sent Events: one `data:` line
// per second, a comment every heartbeat, until the client goes away, the
// server shuts down, Close is called or maxStream has passed (the browser's
// EventSource then reconnects by itself).
func (h *Handler) serveEvents(ctx *fasthttp.RequestCtx) {
	if !getOrHead(ctx) {
		return
	}
	select {
	case <-h.done:
		writeError(ctx, errShuttingDown)
		return
	default:
	}
	if h.streams.Add(1) > h.maxStreams {
		h.streams.Add(-1)
		writeError(ctx, errTooManyStreams)
		return
	}
	rh := &ctx.Response.Header
	rh.SetContentType("text/event-stream")
	rh.Set(fasthttp.HeaderCacheControl, "no-store")
	rh.Set("X-Accel-Buffering", "no") // nginx in front must not buffer the stream
	setSecurityHeaders(rh)
	if ctx.IsHead() {
		h.streams.Add(-1)
		return
	}
	// The stream writer must not touch ctx: capture what it needs. ctx.Done
	// is the server's shutdown channel (nil if the server has none).
	serverDone := ctx.Done()
	end := time.Now().Add(h.maxStream)
	// The listener's WriteTimeout would cut the stream after it has run
	// that long; a deadline set by the handler replaces it for this
	// response. A client that stops reading is still cut off at the end.
	_ = ctx.SetWriteDeadline(end.Add(5 * time.Second))
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer h.streams.Add(-1)
		h.stream(w, serverDone, end)
	})
}

func (h *Handler) stream(w *bufio.Writer, serverDone <-chan struct{}, end time.Time) {
	// retry: how long EventSource waits before reconnecting after the
	// stream ends.
	w.WriteString("retry: 2000\n: flashgate dashboard\n\n")
	if !h.writeEvent(w) {
		return
	}
	tick := time.NewTicker(h.interval)
	defer tick.Stop()
	beat := time.NewTicker(h.heartbeat)
	defer beat.Stop()
	stop := time.NewTimer(time.Until(end))
	defer stop.Stop()
	for {
		select {
		case <-serverDone:
			return
		case <-h.done:
			return
		case <-stop.C:
			return
		case <-beat.C:
			// Flush fails once the client has gone: that is how the
			// stream notices, so every write is flushed at once.
			w.WriteString(": ping\n\n")
			if w.Flush() != nil {
				return
			}
		case <-tick.C:
			if !h.writeEvent(w) {
				return
			}
		}
	}
}

// writeEvent writes one snapshot; JSON has no raw line breaks, so one
// data line carries it. It reports false when the stream must end.
func (h *Handler) writeEvent(w *bufio.Writer) bool {
	b, err := h.encode()
	if err != nil {
		// The page keeps its last data and shows it ageing.
		w.WriteString(": source failed\n\n")
		return w.Flush() == nil
	}
	w.WriteString("data: ")
	w.Write(b)
	w.WriteString("\n\n")
	return w.Flush() == nil
}
