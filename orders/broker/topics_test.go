package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"flashgate/internal/kafkatest"
)

// topicState is what the brokers report of a topic: the fewest replicas of
// any partition, and its min.insync.replicas.
func topicState(t *testing.T, brokers []string, topic string) (replicas int, minInsync string) {
	t.Helper()
	cl, done := Security{}.Client(brokers, 10*time.Second)
	defer done()
	ctx := context.Background()
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 || md.Topics[0].Error != nil {
		t.Fatalf("metadata of %s: %v %+v", topic, err, md)
	}
	replicas = -1
	for _, p := range md.Topics[0].Partitions {
		if replicas < 0 || len(p.Replicas) < replicas {
			replicas = len(p.Replicas)
		}
	}
	res, err := cl.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{
		{ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{minISR}},
	}})
	if err != nil || len(res.Resources) != 1 || res.Resources[0].Error != nil {
		t.Fatalf("describe configs of %s: %v %+v", topic, err, res)
	}
	for _, e := range res.Resources[0].ConfigEntries {
		if e.ConfigName == minISR {
			minInsync = e.ConfigValue
		}
	}
	return replicas, minInsync
}

func ensure(brokers []string, topics ...Topic) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return EnsureTopics(ctx, brokers, Security{}, topics...)
}

// TestEnsureTopicsReplicated: on three brokers, the topics the edge creates
// get kafka.replication_factor copies and kafka.min_insync_replicas, and
// ensuring them again (the next start) accepts them.
func TestEnsureTopicsReplicated(t *testing.T) {
	brokers, _ := kafkatest.Start(t, kfake.NumBrokers(3))
	topics := Replicated(Topics("rep.orders", "rep.dlq", 3), 3, 2)
	if err := ensure(brokers, topics...); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rep.orders", "rep.dlq"} {
		if n, m := topicState(t, brokers, name); n != 3 || m != "2" {
			t.Fatalf("%s: %d replicas, min.insync.replicas %q; want 3 and 2", name, n, m)
		}
	}
	if err := ensure(brokers, topics...); err != nil {
		t.Fatalf("the same topics again: %v", err)
	}
	// Weaker settings than the topic has are fine: it is at least as safe.
	if err := ensure(brokers, Replicated(Topics("rep.orders", "rep.dlq", 3), 2, 1)...); err != nil {
		t.Fatalf("fewer wanted than the topic has: %v", err)
	}
}

// TestEnsureTopicsRefusesWeakerTopic: a topic that exists with fewer
// replicas, or a lower min.insync.replicas, than configured stops the
// start with the topic, what it has and what the setting wants.
func TestEnsureTopicsRefusesWeakerTopic(t *testing.T) {
	brokers, _ := kafkatest.Start(t, kfake.NumBrokers(3))
	if err := ensure(brokers, Topic{Name: "weak.rf", Partitions: 2, ReplicationFactor: 1}, Topic{Name: "weak.isr", Partitions: 2, ReplicationFactor: 3}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		topic Topic
		want  []string
	}{
		{"replication factor 1, 3 configured", Topic{Name: "weak.rf", Partitions: 2, ReplicationFactor: 3},
			[]string{"topic weak.rf", "replication factor 1", "kafka.replication_factor wants 3"}},
		{"the broker's min.insync.replicas, 2 configured", Topic{Name: "weak.isr", Partitions: 2, ReplicationFactor: 3, MinInsyncReplicas: 2},
			[]string{"topic weak.isr", "min.insync.replicas=1", "kafka.min_insync_replicas wants 2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ensure(brokers, tc.topic)
			if err == nil {
				t.Fatal("a weaker topic was accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// Nothing was changed: the weak topic is as it was.
	if n, _ := topicState(t, brokers, "weak.rf"); n != 1 {
		t.Fatalf("weak.rf has %d replicas now", n)
	}
}

// TestEnsureTopicsRefusesBadReplication: a min.insync.replicas above the
// replication factor is refused before anything is created.
func TestEnsureTopicsRefusesBadReplication(t *testing.T) {
	brokers, _ := kafkatest.Start(t)
	err := ensure(brokers, Topic{Name: "bad.isr", Partitions: 1, ReplicationFactor: 2, MinInsyncReplicas: 3})
	if err == nil || !strings.Contains(err.Error(), "bad.isr") || !strings.Contains(err.Error(), "min.insync.replicas 3") {
		t.Fatalf("got %v", err)
	}
	cl, done := Security{}.Client(brokers, 10*time.Second)
	defer done()
	md, err := cl.Metadata(context.Background(), &kafka.MetadataRequest{Topics: []string{"bad.isr"}})
	if err != nil || len(md.Topics) != 1 || md.Topics[0].Error == nil {
		t.Fatalf("bad.isr was created: %v %+v", err, md)
	}
}
