package broker

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// controller is the node the brokers name as their controller.
func controller(t *testing.T, brokers []string) int32 {
	t.Helper()
	cl, done := Security{}.Client(brokers, 5*time.Second)
	defer done()
	md, err := cl.Metadata(context.Background(), &kafka.MetadataRequest{})
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	return int32(md.Controller.ID)
}

// TestEnsureTopicsAfterControllerRestart is bench/README's nemesis item 9
// (seed 302): an edge that starts after a broker came back must start.
// The topics exist; the controller broker is stopped and started again;
// EnsureTopics, while it is down and after it is back, succeeds at once.
// It used to ask the controller to create the existing topics and gave up
// on the first NOT_CONTROLLER — and kfake names no live controller after
// its controller's restart, so every start failed.
func TestEnsureTopicsAfterControllerRestart(t *testing.T) {
	c := kafkatest.StartCluster(t, 3)
	brokers := c.Brokers()
	// Two replicas, not three: kfake lists a partition's replicas only on
	// brokers that are up, so with one down a 3-replica topic would read as
	// weaker than asked (real Kafka lists the offline replica too).
	topics := Replicated(Topics("ctl.orders", "ctl.dlq", 3), 2, 2)
	if err := ensure(brokers, topics...); err != nil {
		t.Fatal(err)
	}
	node := controller(t, brokers)
	c.StopBroker(node)
	quick := func(when string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if err := EnsureTopics(ctx, brokers, Security{}, topics...); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: took %v", when, d)
		}
	}
	quick("controller " + strconv.Itoa(int(node)) + " down")
	c.StartBroker(node)
	quick("controller " + strconv.Itoa(int(node)) + " back")
	// A different partition count is kept, as before: no create is asked.
	if err := ensure(brokers, Replicated(Topics("ctl.orders", "ctl.dlq", 6), 2, 2)...); err != nil {
		t.Fatalf("more partitions wanted than the topic has: %v", err)
	}
	if got, err := c.DescribeTopic("ctl.orders"); err != nil || got.Partitions != 3 {
		t.Fatalf("ctl.orders: %+v %v; want its 3 partitions kept", got, err)
	}
}

// TestEnsureTopicsRetriesNotController: a create answered NOT_CONTROLLER
// (the controller moved) is asked again of the controller the metadata
// names now, and succeeds; one that keeps failing gives up within the
// retry bound, naming the error.
func TestEnsureTopicsRetriesNotController(t *testing.T) {
	brokers, c := kafkatest.Start(t, kfake.NumBrokers(3))
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Err: kerr.NotController, Count: 2})
	if err := ensure(brokers, Topics("moved.orders", "moved.dlq", 2)...); err != nil {
		t.Fatal(err)
	}
	if h.Hits() != 2 {
		t.Errorf("fault hit %d times, want 2", h.Hits())
	}
	for _, name := range []string{"moved.orders", "moved.dlq"} {
		if n, _ := topicState(t, brokers, name); n != 1 {
			t.Fatalf("%s: %d replicas", name, n)
		}
	}

	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Err: kerr.NotController, Count: -1})
	start := time.Now()
	err := ensure(brokers, Topic{Name: "never.orders", Partitions: 1})
	if err == nil || !strings.Contains(err.Error(), "never.orders") || !strings.Contains(err.Error(), "Not Controller") {
		t.Fatalf("got %v; want the topic's NOT_CONTROLLER", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("gave up after %v, want the retry bound (~5s)", d)
	}
	t.Logf("gave up after %v: %v", time.Since(start).Round(time.Millisecond), err)
}
