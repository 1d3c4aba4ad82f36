package orders

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// EmbeddedConfig configures the in-process broker of the zero-setup default.
type EmbeddedConfig struct {
	// DataDir keeps topics, their messages and committed group offsets
	// across restarts ("" keeps them in memory only). One process at a
	// time: the directory is locked.
	DataDir string
	// Port on 127.0.0.1 (0 picks a free one).
	Port int
	// Partitions of the orders topic when it is created (default 6).
	Partitions int
	// SyncWrites fsyncs every produced batch before acknowledging it.
	// Without it a batch sits in the OS page cache: it survives the
	// process being killed, not the machine losing power.
	SyncWrites bool
}

// StartEmbedded starts the embedded Kafka-protocol broker (kfake, one node)
// on a free 127.0.0.1 port with its state under dataDir, and makes sure the
// orders and dead-letter topics exist. See StartEmbeddedWith.
func StartEmbedded(dataDir string) (brokers []string, stop func(), err error) {
	return StartEmbeddedWith(EmbeddedConfig{DataDir: dataDir})
}

// StartEmbeddedWith starts the embedded broker: github.com/twmb/franz-go's
// kfake, which speaks the real protocol (kafka-go writers, readers, consumer
// groups, commits), persisting to DataDir. It is for a first run on one
// machine, like the embedded Redis: one node, no replication. stop closes it
// (flushing its state to DataDir) and releases the directory; close the
// clients first.
func StartEmbeddedWith(cfg EmbeddedConfig) (brokers []string, stop func(), err error) {
	opts := []kfake.Opt{kfake.Ports(cfg.Port), kfake.ClusterID("flashgate-embedded")}
	unlock := func() {}
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, nil, fmt.Errorf("orders: embedded kafka: %w", err)
		}
		if unlock, err = lockDir(cfg.DataDir); err != nil {
			return nil, nil, fmt.Errorf("orders: embedded kafka: %w", err)
		}
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	if cfg.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		unlock()
		return nil, nil, fmt.Errorf("orders: embedded kafka: %w", err)
	}
	stop = func() {
		c.Close()
		unlock()
	}
	brokers = c.ListenAddrs()
	// Also on a restart: a data dir from before may lack a topic.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics := DefaultTopics()
	topics[0].Partitions = cfg.Partitions
	if err := EnsureTopics(ctx, brokers, topics...); err != nil {
		stop()
		return nil, nil, err
	}
	return brokers, stop, nil
}
