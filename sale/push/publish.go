package push

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/rueidis"

	"flashgate/orders/order"
)

// Channel is the pub/sub channel of order outcomes. It is not a key, so it
// needs no hash tag; on Redis Cluster a PUBLISH reaches every node.
const Channel = "sk:stored"

// Message kinds: the outcome every order of the message had.
const (
	kindStored   = 'S' // stored by the consumer: "success"
	kindReleased = 'R' // released (cancelled): "failed"
)

// PublishStored tells every edge that the orders were stored (and marked
// success in Redis). Call it after each stored batch, after MarkSuccess:
// consumer.Config.OnStored. It sends one message per product, pipelined;
// the error joins those that failed. A lost message costs the shoppers of
// that batch their push, not their outcome: their streams end at the
// deadline with the state read then, and the page polls.
func PublishStored(ctx context.Context, c rueidis.Client, products map[string][]int64) error {
	cmds := make(rueidis.Commands, 0, len(products))
	var b []byte
	for p, ids := range products {
		if len(ids) == 0 {
			continue
		}
		if !order.ValidProductID(p) {
			return fmt.Errorf("push: invalid product id %q", p)
		}
		b = appendMessage(b[:0], kindStored, p, ids)
		cmds = append(cmds, c.B().Publish().Channel(Channel).Message(string(b)).Build())
	}
	return publish(ctx, c, cmds)
}

// PublishReleased tells every edge that orders of one product were released
// (an operator cancelled them): their streams end with "failed".
func PublishReleased(ctx context.Context, c rueidis.Client, productID string, orderIDs ...int64) error {
	if len(orderIDs) == 0 {
		return nil
	}
	if !order.ValidProductID(productID) {
		return fmt.Errorf("push: invalid product id %q", productID)
	}
	msg := string(appendMessage(nil, kindReleased, productID, orderIDs))
	return publish(ctx, c, rueidis.Commands{c.B().Publish().Channel(Channel).Message(msg).Build()})
}

func publish(ctx context.Context, c rueidis.Client, cmds rueidis.Commands) error {
	if len(cmds) == 0 {
		return nil
	}
	var errs []error
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("push: publish: %w", errors.Join(errs...))
	}
	return nil
}

// appendMessage encodes kind, product and ids as
//
//	<kind><product> <first id>,<delta>,<delta>...
//
// with the ids sorted: the ids of one batch share their timestamp and node
// bits, so a delta is a digit or two where a full id is 19 digits. Text,
// so that `redis-cli subscribe sk:stored` stays readable.
func appendMessage(b []byte, kind byte, product string, ids []int64) []byte {
	ids = slices.Clone(ids) // the caller's slice is not ours to reorder
	slices.Sort(ids)
	b = append(b, kind)
	b = append(b, product...)
	b = append(b, ' ')
	prev := int64(0)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id-prev, 10)
		prev = id
	}
	return b
}

// decodeMessage parses a message into kind, product (a view of msg) and
// ids (appended to ids[:0]). Anything malformed is refused whole: the
// channel is ours, so a bad message is a bug or someone else's traffic.
func decodeMessage(msg string, ids []int64) (kind byte, product string, out []int64, ok bool) {
	out = ids[:0]
	if len(msg) < 4 || (msg[0] != kindStored && msg[0] != kindReleased) {
		return 0, "", out, false
	}
	kind = msg[0]
	sp := 1
	for sp < len(msg) && msg[sp] != ' ' {
		sp++
	}
	product = msg[1:sp]
	if sp == len(msg) || !order.ValidProductID(product) {
		return 0, "", out, false
	}
	var id int64
	for i := sp + 1; i < len(msg); {
		j := i
		var d int64
		for j < len(msg) && msg[j] >= '0' && msg[j] <= '9' {
			c := int64(msg[j] - '0')
			if d > (maxID-c)/10 {
				return 0, "", out, false
			}
			d = d*10 + c
			j++
		}
		if j == i || (j < len(msg) && msg[j] != ',') || id > maxID-d {
			return 0, "", out, false
		}
		id += d
		if id <= 0 {
			return 0, "", out, false
		}
		out = append(out, id)
		if j < len(msg) {
			j++ // the comma
			if j == len(msg) {
				return 0, "", out, false
			}
		}
		i = j
	}
	if len(out) == 0 {
		return 0, "", out, false
	}
	return kind, product, out, true
}

const maxID = int64(^uint64(0) >> 1)
