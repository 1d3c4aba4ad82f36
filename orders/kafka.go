package orders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// Topic is a topic EnsureTopics creates if it is missing.
type Topic struct {
	Name              string
	Partitions        int // required
	ReplicationFactor int // 0 means 1 (the embedded broker and single-broker setups)
}

// Topics are the orders topic (order and release events, keyed by order id)
// with its partitions, and its dead-letter topic (what could not be
// processed, with the reason in a header; 1 partition: little traffic, no
// ordering to keep), as kafka.topic, kafka.dlq_topic and kafka.partitions
// name them.
func Topics(topic, dlqTopic string, partitions int) []Topic {
	return []Topic{{Name: topic, Partitions: partitions}, {Name: dlqTopic, Partitions: 1}}
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
			return fmt.Errorf("orders: ensure topics: %s: partitions must be positive, got %d", t.Name, p)
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
