package orderstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"flashgate/conf"
	"flashgate/internal/chtest"
	"flashgate/internal/tlstest"
)

// TestClickHouseTLS connects to the secure native port of a real server
// that requires a client certificate, with the options clickhouse.tls
// makes.
func TestClickHouseTLS(t *testing.T) {
	certs := tlstest.New(t)
	srv := chtest.NewTLS(t, chtest.TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientCA: certs.CA})
	ctx := context.Background()
	open := func(tc conf.KafkaTLSConfig) (*ClickHouse, error) {
		opts, err := OptionsFrom(conf.ClickHouseConfig{Addr: srv.SecureAddr(), TLS: tc})
		if err != nil {
			t.Fatal(err)
		}
		opts.DialTimeout, opts.Timeout = time.Second, 5*time.Second
		return OpenClickHouse(ctx, srv.SecureAddr(), freshDB(), opts)
	}

	s, err := open(conf.KafkaTLSConfig{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Insert(ctx, []Row{agedRow(1, "p1", "u1", "2026-11-11")}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Totals(ctx, "p1"); err != nil || got.HeldOrders() != 1 {
		t.Fatalf("totals over TLS: %+v, %v", got, err)
	}

	other := tlstest.New(t)
	for _, tc := range []struct {
		name string
		tls  conf.KafkaTLSConfig
		want string
	}{
		{"UntrustedCA", conf.KafkaTLSConfig{CAFile: other.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}, "certificate signed by unknown authority"},
		{"WrongName", conf.KafkaTLSConfig{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey, ServerName: "ch.example"}, "not ch.example"},
		{"NoClientCertificate", conf.KafkaTLSConfig{CAFile: certs.CA}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := open(tc.tls)
			if err == nil {
				s.Close()
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), srv.SecureAddr()) {
				t.Fatalf("err = %v, want one naming the server and %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}
