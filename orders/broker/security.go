package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"flashgate/conf"
	"flashgate/conf/field"
)

// Security is how a Kafka client connects: TLS (nil: plaintext) and a SASL
// mechanism (nil: none). The zero value is plaintext without
// authentication: the embedded broker and a broker on a trusted network.
// Every Kafka client of the edge (the publisher and the relay through it,
// its dead-letter writer, the consumer's reader and writer, topic creation,
// the lag and drain checks) is built from one Security, so none of them
// connects differently.
type Security struct {
	TLS  *tls.Config
	SASL sasl.Mechanism
}

// SecurityFrom builds the Security that the kafka: section's tls and sasl
// ask for; its errors name the field. conf validated the section already;
// the files are read again here because the edge starts from them.
func SecurityFrom(k conf.KafkaConfig) (Security, error) {
	var s Security
	cfg, errs := k.TLS.Config()
	if len(errs) > 0 {
		var nested field.Errors
		nested.Nest("kafka.tls", errs)
		return Security{}, fmt.Errorf("orders: %w", nested.Err())
	}
	s.TLS = cfg
	if k.SASL.Mechanism == "" {
		return s, nil
	}
	user, pw, err := k.SASL.Credentials()
	if err != nil {
		return Security{}, fmt.Errorf("orders: kafka.sasl: %w", err)
	}
	switch k.SASL.Mechanism {
	case conf.SASLPlain:
		s.SASL = plain.Mechanism{Username: user, Password: pw}
	case conf.SASLScramSHA256, conf.SASLScramSHA512:
		algo := scram.SHA256
		if k.SASL.Mechanism == conf.SASLScramSHA512 {
			algo = scram.SHA512
		}
		if s.SASL, err = scram.Mechanism(algo, user, pw); err != nil {
			return Security{}, fmt.Errorf("orders: kafka.sasl: %w", err)
		}
	default:
		return Security{}, fmt.Errorf("orders: kafka.sasl.mechanism: must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", k.SASL.Mechanism)
	}
	return s, nil
}

// Plain reports whether s is the zero value (no TLS, no SASL).
func (s Security) Plain() bool { return s.TLS == nil && s.SASL == nil }

// Transport is a kafka-go transport that connects as s. Close its idle
// connections when done with it (kafka-go's Client and Writer leave them).
func (s Security) Transport(clientID string, metadataTTL time.Duration) *kafka.Transport {
	return &kafka.Transport{
		Dial:        (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ClientID:    clientID,
		MetadataTTL: metadataTTL,
		TLS:         s.TLS,
		SASL:        s.SASL,
	}
}

// Dialer is what a kafka-go Reader connects with (it does not use a
// Transport): kafka-go's default dialer, plus s.
func (s Security) Dialer() *kafka.Dialer {
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: s.TLS, SASLMechanism: s.SASL}
}

// Client is a kafka-go client for brokers that connects as s; done closes
// its connections.
func (s Security) Client(brokers []string, timeout time.Duration) (cl *kafka.Client, done func()) {
	tr := s.Transport("flashgate", 0)
	return &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: timeout, Transport: tr}, tr.CloseIdleConnections
}

// Probe connects to each broker as s until one accepts, and returns nil
// then, or why none did. kafka-go's Client reports a refused handshake or
// refused credentials as "Broker Not Available"; the Dialer returns the
// cause (the certificate, the SASL error), which is what an operator
// needs at start.
func (s Security) Probe(ctx context.Context, brokers []string) error {
	var errs []error
	for _, b := range brokers {
		conn, err := s.Dialer().DialContext(ctx, "tcp", b)
		if err == nil {
			conn.Close()
			return nil
		}
		how := "plaintext"
		switch {
		case s.TLS != nil && s.SASL != nil:
			how = "TLS, SASL " + s.SASL.Name()
		case s.TLS != nil:
			how = "TLS"
		case s.SASL != nil:
			how = "SASL " + s.SASL.Name()
		}
		errs = append(errs, fmt.Errorf("broker %s refused the connection (%s; kafka.tls, kafka.sasl): %w", b, how, err))
	}
	return errors.Join(errs...)
}
