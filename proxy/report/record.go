package report

import (
	"encoding/binary"
	"errors"
	"fmt"

	"flashgate/metrics"
	"flashgate/proxy/dashboard"
)

// Second is one edge's record of one second of a sale, as the edge's
// sampler writes it to the sale's timeline (stock.AppendTimeline) and the
// report reads it back. The room's figures and the stock are the edge's
// view of shared state (every edge reports about the same); the answers
// and the latency are the edge's own, summed over edges by the report.
type Second struct {
	Node int64
	Sec  int64 // unix seconds
	// Codes are the `do` answers of the second by dashboard.CodeIndex.
	Codes [dashboard.NumCodes]uint32
	// Buckets are the `do` latencies of the second, counted in
	// metrics.LatencyBuckets (the last: beyond the highest bound).
	Buckets [NumBuckets]uint32
	Flags   uint8
	Left    int64 // stock left; -1 unknown
	// The waiting room: tickets given, in line, let in, active; -1 for a
	// sale without a room.
	Joined, Waiting, Admitted, Active int64
}

// NumBuckets is how many latency buckets a record carries.
const NumBuckets = 17

func init() {
	if len(metrics.LatencyBuckets)+1 != NumBuckets {
		panic("report: NumBuckets does not match metrics.LatencyBuckets")
	}
}

// The state of the sale on the edge during the second.
const (
	FlagRecovering  uint8 = 1 << iota // fenced: closed until rebuilt from the ledger
	FlagDegraded                      // the degrade switch was on for it
	FlagBreakerOpen                   // its Redis breaker was open (or half-open)
)

// recordVersion starts every record, so a later layout can be told apart.
const recordVersion = 1

// Append encodes r after dst: a version byte, then varints. The node and
// the second come first, which keeps two edges' records of one second
// distinct members of the timeline's sorted set. It allocates only when
// dst is too small.
func (r *Second) Append(dst []byte) []byte {
	dst = append(dst, recordVersion)
	dst = binary.AppendUvarint(dst, uint64(r.Node))
	dst = binary.AppendVarint(dst, r.Sec)
	for _, c := range r.Codes {
		dst = binary.AppendUvarint(dst, uint64(c))
	}
	for _, c := range r.Buckets {
		dst = binary.AppendUvarint(dst, uint64(c))
	}
	dst = append(dst, r.Flags)
	for _, v := range [...]int64{r.Left, r.Joined, r.Waiting, r.Admitted, r.Active} {
		dst = binary.AppendVarint(dst, v)
	}
	return dst
}

// Attempts is the second's `do` answers, every code.
func (r *Second) Attempts() uint64 {
	var n uint64
	for _, c := range r.Codes {
		n += uint64(c)
	}
	return n
}

var errRecord = errors.New("report: malformed timeline record")

// DecodeSecond reads a record Append wrote.
func DecodeSecond(b []byte) (Second, error) {
	var r Second
	if len(b) == 0 || b[0] != recordVersion {
		return r, fmt.Errorf("%w: version", errRecord)
	}
	b = b[1:]
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	sv := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	r.Node = int64(uv())
	r.Sec = sv()
	for i := range r.Codes {
		r.Codes[i] = uint32(uv())
	}
	for i := range r.Buckets {
		r.Buckets[i] = uint32(uv())
	}
	if len(b) == 0 {
		return r, fmt.Errorf("%w: short", errRecord)
	}
	r.Flags, b = b[0], b[1:]
	for _, p := range [...]*int64{&r.Left, &r.Joined, &r.Waiting, &r.Admitted, &r.Active} {
		if len(b) == 0 {
			return r, fmt.Errorf("%w: short", errRecord)
		}
		*p = sv()
	}
	if b == nil {
		return r, fmt.Errorf("%w: bad number", errRecord)
	}
	return r, nil
}
