package orders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// Topic names.
const (
	DefaultTopic    = "seckill.orders"     // order and release events, keyed by order id
	DefaultDLQTopic = "seckill.orders.dlq" // what could not be processed, with the reason in a header
)

// DefaultPartitions is the orders topic's partition count when not configured.
const DefaultPartitions = 6

// Topic is a topic EnsureTopics creates if it is missing.
type Topic struct {
	Name              string
	Partitions        int // 0 means DefaultPartitions
	ReplicationFactor int // 0 means 1 (the embedded broker and single-broker setups)
}

// DefaultTopics are the orders topic (DefaultPartitions) and its
// dead-letter topic (1 partition: little traffic, no ordering to keep).
func DefaultTopics() []Topic {
	return []Topic{{Name: DefaultTopic}, {Name: DefaultDLQTopic, Partitions: 1}}
}

// EnsureTopics creates the topics that do not exist yet. An existing topic
// is left as it is, whatever its partition count: repartitioning would move
// keys, and with them the order of one order's events.
func EnsureTopics(ctx context.Context, brokers []string, topics ...Topic) error {
	if len(brokers) == 0 {
		return errors.New("orders: ensure topics: no brokers")
	}
	if len(topics) == 0 {
		return nil
	}
	req := &kafka.CreateTopicsRequest{}
	for _, t := range topics {
		if t.Name == "" {
			return errors.New("orders: ensure topics: empty topic name")
		}
		p, rf := t.Partitions, t.ReplicationFactor
		if p <= 0 {
			p = DefaultPartitions
		}
		if rf <= 0 {
			rf = 1
		}
		req.Topics = append(req.Topics, kafka.TopicConfig{Topic: t.Name, NumPartitions: p, ReplicationFactor: rf})
	}
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	res, err := cl.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("orders: create topics: %w", err)
	}
	for name, err := range res.Errors {
		if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			return fmt.Errorf("orders: create topic %s: %w", name, err)
		}
	}
	return nil
}
