package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// Topic is a topic EnsureTopics creates if it is missing.
type Topic struct {
	Name              string
	Partitions        int // required
	ReplicationFactor int // 0 means 1 (the embedded broker and single-broker setups)
	// MinInsyncReplicas is the topic's min.insync.replicas (0: the broker's
	// default): with acks=all, how many copies hold a write before it is
	// acknowledged.
	MinInsyncReplicas int
}

// Topics are the orders topic (order and release events, keyed by order id)
// with its partitions, and its dead-letter topic (what could not be
// processed, with the reason in a header; 1 partition: little traffic, no
// ordering to keep), as kafka.topic, kafka.dlq_topic and kafka.partitions
// name them.
func Topics(topic, dlqTopic string, partitions int) []Topic {
	return []Topic{{Name: topic, Partitions: partitions}, {Name: dlqTopic, Partitions: 1}}
}

// Replicated gives every topic the replication the kafka: section asks for
// (kafka.replication_factor, kafka.min_insync_replicas): a dead letter is
// worth as many copies as an order.
func Replicated(topics []Topic, replicationFactor, minInsyncReplicas int) []Topic {
	out := make([]Topic, len(topics))
	for i, t := range topics {
		t.ReplicationFactor, t.MinInsyncReplicas = replicationFactor, minInsyncReplicas
		out[i] = t
	}
	return out
}

// minISR is the topic config that min_insync_replicas sets.
const minISR = "min.insync.replicas"

// EnsureTopics creates the topics that do not exist yet, connecting as sec.
// It reads the metadata first and asks to create only the topics the
// brokers do not know: creating is the controller's job, and a start must
// not depend on a controller it does not need (an edge started after the
// controller broker came back never started: bench/README.md, nemesis
// item 9). An existing topic is left as it is, whatever its partition
// count, more or fewer than asked for, and nothing is logged:
// repartitioning would move keys, and with them the order of one order's
// events. But one with fewer replicas or a lower min.insync.replicas than
// asked for is refused: acks=all on it would promise fewer copies than the
// operator configured. A create the brokers answer with a retriable error
// (NOT_CONTROLLER: the controller moved; a timeout) is asked again, of the
// controller a fresh metadata read names, with backoff, at most
// createTries times and within ctx; TOPIC_ALREADY_EXISTS (another edge was
// first) counts as existing.
func EnsureTopics(ctx context.Context, brokers []string, sec Security, topics ...Topic) error {
	if len(brokers) == 0 {
		return errors.New("orders: ensure topics: no brokers")
	}
	if len(topics) == 0 {
		return nil
	}
	want := make([]Topic, 0, len(topics))
	names := make([]string, 0, len(topics))
	for _, t := range topics {
		if t.Name == "" {
			return errors.New("orders: ensure topics: empty topic name")
		}
		if t.Partitions <= 0 {
			return fmt.Errorf("orders: ensure topics: %s: partitions must be positive, got %d", t.Name, t.Partitions)
		}
		if t.ReplicationFactor <= 0 {
			t.ReplicationFactor = 1
		}
		if t.MinInsyncReplicas < 0 || t.MinInsyncReplicas > t.ReplicationFactor {
			return fmt.Errorf("orders: ensure topics: %s: min.insync.replicas %d must be between 0 and the replication factor %d", t.Name, t.MinInsyncReplicas, t.ReplicationFactor)
		}
		want = append(want, t)
		names = append(names, t.Name)
	}
	cl, done := sec.Client(brokers, 10*time.Second)
	defer done()
	// kafka-go's Client.Metadata never asks the brokers to auto-create.
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		if cause := sec.Probe(ctx, brokers); cause != nil {
			return fmt.Errorf("orders: ensure topics: %w", cause)
		}
		return fmt.Errorf("orders: ensure topics: metadata: %w", err)
	}
	known := map[string]bool{}
	for _, mt := range md.Topics {
		// Any other answer than "unknown" (a leader being elected, a
		// refusal) is the create's to settle: it says "exists" or why not.
		known[mt.Name] = mt.Error == nil
	}
	var existing, missing []Topic
	for _, t := range want {
		if known[t.Name] {
			existing = append(existing, t)
		} else {
			missing = append(missing, t)
		}
	}
	if err := checkTopics(ctx, cl, existing); err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	raced, err := createTopics(ctx, brokers, sec, missing)
	if err != nil || len(raced) == 0 {
		return err
	}
	// Created meanwhile by someone else: cl's metadata predates them.
	cl2, done2 := sec.Client(brokers, 10*time.Second)
	defer done2()
	return checkTopics(ctx, cl2, raced)
}

// The bound on asking to create topics again: 7 waits of 100ms doubling to
// 1s, ~4.5s in all, within the 10s a start gives EnsureTopics — long enough
// for a controller election, short enough that a supervisor's next start
// retries with a fresh look.
const (
	createTries      = 8
	createMinBackoff = 100 * time.Millisecond
	createMaxBackoff = time.Second
)

// createTopics creates topics, each try on a new client: kafka-go sends a
// CreateTopics to the controller its metadata names, and a new client
// reads the metadata afresh, so a retry after NOT_CONTROLLER goes to the
// controller of now. It returns the topics that already existed.
func createTopics(ctx context.Context, brokers []string, sec Security, topics []Topic) (existed []Topic, err error) {
	backoff := createMinBackoff
	for try := 1; ; try++ {
		var again []Topic
		var last error
		res, err := createOnce(ctx, brokers, sec, topics)
		if err != nil {
			// The controller may be the broker that just went away;
			// the next try reads which one it is now.
			again, last = topics, fmt.Errorf("orders: create topics: %w", err)
		} else {
			for _, t := range topics {
				terr, ok := res.Errors[t.Name]
				var kerr kafka.Error
				switch {
				case !ok:
					again, last = append(again, t), fmt.Errorf("orders: create topic %s: the broker did not answer for it", t.Name)
				case terr == nil:
				case errors.Is(terr, kafka.TopicAlreadyExists):
					existed = append(existed, t)
				case errors.As(terr, &kerr) && kerr.Temporary():
					again, last = append(again, t), fmt.Errorf("orders: create topic %s: %w", t.Name, terr)
				default:
					return nil, fmt.Errorf("orders: create topic %s: %w", t.Name, terr)
				}
			}
		}
		if len(again) == 0 {
			return existed, nil
		}
		if try == createTries {
			return nil, fmt.Errorf("%w (%d tries)", last, try)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%d tries, then %v)", last, try, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, createMaxBackoff)
		topics = again
	}
}

// createOnce asks the controller, as a new client sees it, to create topics.
func createOnce(ctx context.Context, brokers []string, sec Security, topics []Topic) (*kafka.CreateTopicsResponse, error) {
	req := &kafka.CreateTopicsRequest{}
	for _, t := range topics {
		tc := kafka.TopicConfig{Topic: t.Name, NumPartitions: t.Partitions, ReplicationFactor: t.ReplicationFactor}
		if t.MinInsyncReplicas > 0 {
			tc.ConfigEntries = []kafka.ConfigEntry{{ConfigName: minISR, ConfigValue: strconv.Itoa(t.MinInsyncReplicas)}}
		}
		req.Topics = append(req.Topics, tc)
	}
	cl, done := sec.Client(brokers, 10*time.Second)
	defer done()
	return cl.CreateTopics(ctx, req)
}

// checkTopics refuses an existing topic weaker than asked for: fewer
// replicas per partition, or a lower min.insync.replicas.
func checkTopics(ctx context.Context, cl *kafka.Client, topics []Topic) error {
	if len(topics) == 0 {
		return nil
	}
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		return fmt.Errorf("orders: check topics: metadata: %w", err)
	}
	replicas := map[string]int{}
	for _, mt := range md.Topics {
		if mt.Error != nil {
			return fmt.Errorf("orders: check topic %s: %w", mt.Name, mt.Error)
		}
		fewest := -1
		for _, p := range mt.Partitions {
			if fewest < 0 || len(p.Replicas) < fewest {
				fewest = len(p.Replicas)
			}
		}
		replicas[mt.Name] = fewest
	}
	dreq := &kafka.DescribeConfigsRequest{}
	for _, t := range topics {
		if n := replicas[t.Name]; n < t.ReplicationFactor {
			return fmt.Errorf("orders: topic %s exists with replication factor %d, kafka.replication_factor wants %d: raise it on the cluster (kafka-reassign-partitions) or lower the setting", t.Name, n, t.ReplicationFactor)
		}
		if t.MinInsyncReplicas > 0 {
			dreq.Resources = append(dreq.Resources, kafka.DescribeConfigRequestResource{
				ResourceType: kafka.ResourceTypeTopic, ResourceName: t.Name, ConfigNames: []string{minISR},
			})
		}
	}
	if len(dreq.Resources) == 0 {
		return nil
	}
	dres, err := cl.DescribeConfigs(ctx, dreq)
	if err != nil {
		return fmt.Errorf("orders: check topics: describe configs: %w", err)
	}
	has := map[string]int{}
	for _, r := range dres.Resources {
		if r.Error != nil {
			return fmt.Errorf("orders: check topic %s: describe configs: %w", r.ResourceName, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == minISR {
				n, err := strconv.Atoi(e.ConfigValue)
				if err != nil {
					return fmt.Errorf("orders: check topic %s: %s is %q", r.ResourceName, minISR, e.ConfigValue)
				}
				has[r.ResourceName] = n
			}
		}
	}
	for _, t := range topics {
		if t.MinInsyncReplicas == 0 {
			continue
		}
		n, ok := has[t.Name]
		if !ok {
			return fmt.Errorf("orders: check topic %s: the brokers did not report its %s", t.Name, minISR)
		}
		if n < t.MinInsyncReplicas {
			return fmt.Errorf("orders: topic %s exists with %s=%d, kafka.min_insync_replicas wants %d: raise it on the cluster (kafka-configs --alter) or lower the setting", t.Name, minISR, n, t.MinInsyncReplicas)
		}
	}
	return nil
}
