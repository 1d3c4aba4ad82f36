package stock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// The sale's timeline: what the edges saw of it, second by second (answers
// by code, latency, the room's line, the breaker and fence), kept beside
// the sale so that its report can tell the story after the edges have
// stopped. Each edge adds one record per second in which something moved;
// the records are opaque here (the edge's report package encodes them).
//
// The bound: TimelineMax records per sale (10 hours of one edge's seconds,
// or 2.5 hours of four), the oldest trimmed first; the key expires
// TimelineTTL after the last record. What it costs Redis: one pipelined
// ZADD + ZREMRANGEBYRANK + EXPIRE per sale per edge per second of activity,
// a few dozen bytes each.
const (
	TimelineMax = 36000
	TimelineTTL = 7 * 24 * time.Hour
)

// AppendTimeline adds one edge's record of second sec of the sale.
func (s *Store) AppendTimeline(ctx context.Context, productID string, sec int64, rec []byte) error {
	if err := checkProduct(productID); err != nil {
		return err
	}
	key := TimelineKey(productID)
	for _, r := range s.c.DoMulti(ctx,
		s.c.B().Zadd().Key(key).ScoreMember().ScoreMember(float64(sec), rueidis.BinaryString(rec)).Build(),
		s.c.B().Zremrangebyrank().Key(key).Start(0).Stop(-(TimelineMax + 1)).Build(),
		s.c.B().Expire().Key(key).Seconds(int64(TimelineTTL/time.Second)).Build(),
	) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("stock: timeline of %s: %w", productID, err)
		}
	}
	return nil
}

// Timeline reads the sale's records from second fromSec on (0: all), oldest
// first.
func (s *Store) Timeline(ctx context.Context, productID string, fromSec int64) ([][]byte, error) {
	if err := checkProduct(productID); err != nil {
		return nil, err
	}
	ms, err := s.c.Do(ctx, s.c.B().Zrangebyscore().Key(TimelineKey(productID)).
		Min(strconv.FormatInt(fromSec, 10)).Max("+inf").Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("stock: timeline of %s: %w", productID, err)
	}
	out := make([][]byte, 0, len(ms))
	for _, m := range ms {
		b, err := m.AsBytes()
		if err != nil {
			return nil, fmt.Errorf("stock: timeline of %s: %w", productID, err)
		}
		out = append(out, b)
	}
	return out, nil
}
