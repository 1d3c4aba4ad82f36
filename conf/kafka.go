package conf

import (
	"crypto/tls"
	"time"

	"flashgate/conf/field"
)

// KafkaConfig is the `kafka:` section: where order events go.
type KafkaConfig struct {
	// Brokers; empty starts the embedded Kafka-protocol broker (kfake) in
	// this process, with its state under data_dir/kafka (demo only).
	Brokers  []string `yaml:"brokers"`
	Topic    string   `yaml:"topic"`
	DLQTopic string   `yaml:"dlq_topic"`
	// Partitions of the orders topic when the edge creates it.
	Partitions int `yaml:"partitions"`
	// ReplicationFactor and MinInsyncReplicas of the topics the edge
	// creates; an existing topic with fewer is refused at start (see
	// conf/kafka.go).
	ReplicationFactor int `yaml:"replication_factor"`
	MinInsyncReplicas int `yaml:"min_insync_replicas"`
	// TLS and SASL are how every Kafka client of the edge connects.
	TLS  KafkaTLSConfig  `yaml:"tls"`
	SASL KafkaSASLConfig `yaml:"sasl"`
	// BatchTimeout is how long a dead-lettered message waits for others
	// to share its produce request. Order events wait for no timer: per
	// partition one request is in flight and what queued meanwhile goes
	// as the next one (orders/producer.go).
	BatchTimeout time.Duration `yaml:"batch_timeout"`
	// Timeout bounds one publish: past it the shopper gets 503 with the
	// order id, and the outbox relay delivers the event.
	Timeout time.Duration `yaml:"timeout"`
}

// fill gives the settings left out or written as zero their defaults.
func (k *KafkaConfig) fill() {
	orDefault(&k.Topic, "seckill.orders")
	orDefault(&k.DLQTopic, "seckill.orders.dlq")
	orDefault(&k.Partitions, 6)
	orDefault(&k.ReplicationFactor, 1)
	orDefault(&k.BatchTimeout, 2*time.Millisecond)
	orDefault(&k.Timeout, 3*time.Second)
}

// WithDefaults returns c with the defaults Parse gives the `kafka:`
// section: constructors fill their zero settings from it (doc.go).
func (c KafkaConfig) WithDefaults() KafkaConfig {
	c.fill()
	return c
}

// The replication settings: a topic the edge creates gets
// kafka.replication_factor copies of every partition (default 1, for the
// embedded broker and a single broker; production wants 3) and, when
// kafka.min_insync_replicas is set, that topic config (0 leaves the
// broker's default). With acks=all a write is acknowledged once
// min.insync.replicas copies hold it, so 3 and 2 survive one broker lost
// without refusing writes. An existing topic with fewer replicas or a lower
// min.insync.replicas than configured is refused at start: the edge would
// otherwise promise durability the cluster does not give.
const maxReplicationFactor = 32767 // the protocol's int16

// KafkaTLSConfig is `kafka.tls`: TLS to every broker. Enabled, or any
// file, turns it on; certificates are always verified (against the
// system's roots unless ca_file is set).
type KafkaTLSConfig struct {
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of the CAs that sign the brokers'
	// certificates ("": the system's roots).
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate and its key (PEM),
	// for brokers that authenticate clients by certificate (ssl.client.auth
	// required); both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the brokers' certificates must carry ("": the
	// host of each broker address).
	ServerName string `yaml:"server_name"`
}

// On reports whether the section asks for TLS.
func (t *KafkaTLSConfig) On() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != ""
}

// Config loads the section's files into a client configuration: nil when
// TLS is off. Errors name the field, relative to `tls`. The files are read
// as redis.tls reads them (one loader for both).
func (t *KafkaTLSConfig) Config() (*tls.Config, field.Errors) {
	if !t.On() {
		return nil, nil
	}
	files := RedisTLSConfig{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}
	if !files.Enabled() {
		return &tls.Config{MinVersion: tls.VersionTLS12}, nil
	}
	return files.Config()
}

// The SASL mechanisms the edge speaks.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// KafkaSASLConfig is `kafka.sasl`: the edge's user on the brokers. PLAIN
// sends the password as it is: use it over kafka.tls only.
type KafkaSASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; "" is no SASL.
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`               // or env:NAME
	Password  string `yaml:"password" secret:"true"` // or env:NAME
}

// Credentials resolves env:NAME in the username and the password.
func (s *KafkaSASLConfig) Credentials() (user, password string, err error) {
	if user, err = field.ResolveEnv(s.Username); err != nil {
		return "", "", err
	}
	password, err = field.ResolveEnv(s.Password)
	return user, password, err
}

func (k *KafkaConfig) validate(errs *field.Errors) {
	if k.Partitions < 1 || k.Partitions > 1000 {
		errs.Add("kafka.partitions", "must be between 1 and 1000, got %d", k.Partitions)
	}
	if k.BatchTimeout < 0 || k.BatchTimeout > time.Second {
		errs.Add("kafka.batch_timeout", "must be between 0 and 1s, got %v", k.BatchTimeout)
	}
	if k.Timeout < 100*time.Millisecond || k.Timeout > time.Minute {
		errs.Add("kafka.timeout", "must be between 100ms and 1m, got %v", k.Timeout)
	}
	if k.ReplicationFactor < 1 || k.ReplicationFactor > maxReplicationFactor {
		errs.Add("kafka.replication_factor", "must be between 1 and %d, got %d", maxReplicationFactor, k.ReplicationFactor)
	}
	switch {
	case k.MinInsyncReplicas < 0:
		errs.Add("kafka.min_insync_replicas", "must be 0 (the broker's default) or positive, got %d", k.MinInsyncReplicas)
	case k.MinInsyncReplicas > k.ReplicationFactor && k.ReplicationFactor >= 1:
		errs.Add("kafka.min_insync_replicas", "%d is more than kafka.replication_factor (%d): no write could ever be acknowledged", k.MinInsyncReplicas, k.ReplicationFactor)
	}
	embedded := len(k.Brokers) == 0
	if embedded && k.ReplicationFactor > 1 {
		errs.Add("kafka.replication_factor", "the embedded broker is one node: %d copies are impossible; set kafka.brokers", k.ReplicationFactor)
	}
	if k.TLS.On() && embedded {
		errs.Add("kafka.tls", "the embedded broker has no TLS: set kafka.brokers")
	}
	_, tlsErrs := k.TLS.Config()
	errs.Nest("kafka.tls", tlsErrs)
	s := k.SASL
	switch s.Mechanism {
	case "":
		if s.Username != "" || s.Password != "" {
			errs.Add("kafka.sasl.mechanism", "is required with kafka.sasl.username and password (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
		}
		return
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
	default:
		errs.Add("kafka.sasl.mechanism", "must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", s.Mechanism)
	}
	if embedded {
		errs.Add("kafka.sasl", "the embedded broker has no SASL: set kafka.brokers")
	}
	user, err := field.ResolveEnv(s.Username)
	if err != nil {
		errs.Add("kafka.sasl.username", "%v", err)
	} else if user == "" {
		errs.Add("kafka.sasl.username", "is required with kafka.sasl.mechanism")
	}
	if pw, err := field.ResolveEnv(s.Password); err != nil {
		errs.Add("kafka.sasl.password", "%v", err)
	} else if pw == "" {
		errs.Add("kafka.sasl.password", "is required with kafka.sasl.mechanism")
	}
}
