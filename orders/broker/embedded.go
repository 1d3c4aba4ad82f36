package broker

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
	// Topics are created if missing, also on a restart: a data dir from
	// before may lack one (see Topics).
	Topics []Topic
	// SyncWrites fsyncs every produced batch before acknowledging it.
	// Without it a batch sits in the OS page cache: it survives the
	// process being killed, not the machine losing power.
	SyncWrites bool
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := EnsureTopics(ctx, brokers, Security{}, cfg.Topics...); err != nil {
		stop()
		return nil, nil, err
	}
	return brokers, stop, nil
}
