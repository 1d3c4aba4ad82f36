package push

import (
	"log/slog"

	"flashgate/conf"
	"flashgate/orders/stock"
)

// Config is what New needs: the `events:` section (a zero setting takes
// conf's default, as in a file that leaves it out), and what the wiring
// provides.
type Config struct {
	conf.EventsConfig

	// KeepHijackedConns must equal the fasthttp.Server's KeepHijackedConns.
	// With it a stream costs no goroutine; without it the hijack handler
	// waits for the stream to end (fasthttp would close the connection).
	KeepHijackedConns bool
	// Render writes the JSON of an event (sale.AppendResult): the same
	// document /api/seckill/result answers. Required.
	Render func(b []byte, o stock.OrderInfo) []byte
	Log    *slog.Logger
	// Now returns unix nanoseconds (tests inject a clock).
	Now func() int64
}

// maxDefaultStreams caps the automatic max_streams (events.max_streams: 0).
const maxDefaultStreams = 50_000
