package kafkatest

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Start starts a one-broker kfake cluster on a free loopback port, closed
// when the test ends, and returns its bootstrap addresses. Topics are not
// auto-created: create them (broker.EnsureTopics) or pass
// kfake.SeedTopics. opts come after the defaults, so they override them
// (kfake.NumBrokers(3) for leader moves, kfake.DataDir for persistence).
func Start(t testing.TB, opts ...kfake.Opt) (brokers []string, cluster *kfake.Cluster) {
	t.Helper()
	all := append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs(), c
}
