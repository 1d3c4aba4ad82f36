package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"flashgate/orders/stock"
)

// The checker's facts, read from outside: the orders table (FINAL) over
// ClickHouse's HTTP interface, the order topic with a Kafka client of its
// own (franz-go, not the edge's kafka-go), each sale's stock from the
// master serving it.

// readStored reads seckill_order FINAL.
func readStored(httpAddr, db string) ([]Stored, map[string]int, error) {
	q := "SELECT toString(order_id), product_id, user_id, quantity, status, expired, toUnixTimestamp(pay_time), pay_by_ms FROM " +
		db + ".seckill_order FINAL FORMAT TabSeparated"
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Post("http://"+httpAddr+"/?query="+url.QueryEscape(q), "text/plain", nil)
	if err != nil {
		return nil, nil, fmt.Errorf("clickhouse: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2000))
		return nil, nil, fmt.Errorf("clickhouse: %d %s", resp.StatusCode, b)
	}
	var out []Stored
	rows := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 8 {
			return nil, nil, fmt.Errorf("clickhouse: a row of %d fields: %q", len(f), sc.Text())
		}
		s := Stored{OrderID: f[0], Product: f[1], User: f[2]}
		s.Qty, _ = strconv.ParseInt(f[3], 10, 64)
		s.Status, _ = strconv.Atoi(f[4])
		s.Expired = f[5] == "1"
		s.PayTimeS, _ = strconv.ParseInt(f[6], 10, 64)
		s.PayByMs, _ = strconv.ParseInt(f[7], 10, 64)
		if rows[s.OrderID] == 0 {
			out = append(out, s)
		}
		rows[s.OrderID]++
	}
	return out, rows, sc.Err()
}

// readTopic reads every record of topic from the start, until no more
// came for idle.
func readTopic(ctx context.Context, brokers []string, topic string, idle time.Duration) ([]Event, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ClientID("bench-nemesis-checker"))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []Event
	var bad error
	last := time.Now() // the last poll that brought records
	for time.Since(last) < idle {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			var e Event
			if err := json.Unmarshal(r.Value, &e); err != nil && bad == nil {
				bad = fmt.Errorf("%s: an undecodable record at partition %d offset %d: %v", topic, r.Partition, r.Offset, err)
			}
			out = append(out, e)
		})
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && bad == nil {
				bad = fmt.Errorf("%s partition %d: %v", t, p, err)
			}
		})
		if n > 0 {
			last = time.Now()
		}
	}
	return out, bad
}

// readRedisSales reads each product's stock key from the master serving
// its slot.
func readRedisSales(masterOf func(string) string, products []ProductSpec) ([]RedisSale, error) {
	var out []RedisSale
	for _, p := range products {
		key := stock.StockKey(p.ID)
		rc, err := dialRedis(masterOf(key))
		if err != nil {
			return nil, err
		}
		v, err := rc.Do("GET", key)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", key, err)
		}
		r := RedisSale{Product: p.ID}
		if v != nil {
			s := fmt.Sprint(v)
			if b, ok := v.([]byte); ok {
				s = string(b)
			}
			if r.Remaining, err = strconv.ParseInt(s, 10, 64); err != nil {
				return nil, fmt.Errorf("GET %s: %q", key, s)
			}
			r.Present = true
		}
		out = append(out, r)
	}
	return out, nil
}
