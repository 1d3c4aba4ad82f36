package conf

import (
	"errors"
	"strings"
	"testing"
	"time"

	"flashgate/conf/field"
)

func TestListenTLSDefaultsAndHSTSForms(t *testing.T) {
	doc, err := Parse([]byte("listen:\n  tls:\n    certificates:\n      - {cert_file: c.pem, key_file: k.pem, names: [Shop.Example.COM.]}\n    hsts: 31536000\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tl := doc.Config.Listen.TLS
	if !tl.Enabled() || !tl.SessionTickets || tl.TicketRotation != time.Hour || tl.TicketLifetime != 12*time.Hour {
		t.Fatalf("defaults: %+v", tl)
	}
	if tl.HSTS.Seconds() != 31536000 {
		t.Fatalf("hsts in seconds: %d", tl.HSTS.Seconds())
	}
	if got := tl.Certificates[0].Names[0]; got != "shop.example.com" {
		t.Fatalf("names are matched in lower case without the root dot: %q", got)
	}
	for src, want := range map[string]int64{"0": 0, "8760h": 31536000, "1s": 1} {
		doc, err := Parse([]byte("listen:\n  tls:\n    certificates: [{cert_file: c, key_file: k}]\n    hsts: "+src+"\n"), "t.yaml")
		if err != nil {
			t.Fatalf("hsts %s: %v", src, err)
		}
		if got := doc.Config.Listen.TLS.HSTS.Seconds(); got != want {
			t.Fatalf("hsts %s: %d seconds, want %d", src, got, want)
		}
	}
	doc, err = Parse([]byte("listen:\n  tls:\n    certificates: [{cert_file: c, key_file: k}]\n    session_tickets: false\n"), "t.yaml")
	if err != nil || doc.Config.Listen.TLS.SessionTickets {
		t.Fatalf("session_tickets: false must stay false: %v", err)
	}
	if d := Defaults(); d.Listen.TLS.Enabled() {
		t.Fatal("TLS must be off by default")
	}
}

func TestListenTLSErrorsNameFieldAndLine(t *testing.T) {
	cert := "listen:\n  tls:\n    certificates:\n      - cert_file: c.pem\n        key_file: k.pem\n"
	cases := []struct {
		name, yaml, path string
		line             int
		msg              string
	}{
		{"no key file", "listen:\n  tls:\n    certificates:\n      - cert_file: c.pem\n", "listen.tls.certificates[0].key_file", 4, "required"},
		{"no cert file", "listen:\n  tls:\n    certificates:\n      - key_file: k.pem\n", "listen.tls.certificates[0].cert_file", 4, "required"},
		{"bad name", cert + "        names: [\"shop example\"]\n", "listen.tls.certificates[0].names[0]", 6, "not a server name"},
		{"inner wildcard", cert + "        names: [\"a.*.example.com\"]\n", "listen.tls.certificates[0].names[0]", 6, "first label"},
		{"address as name", cert + "        names: [\"10.0.0.1\"]\n", "listen.tls.certificates[0].names[0]", 6, "address"},
		{"hsts without tls", "listen:\n  tls:\n    hsts: 100\n", "listen.tls.hsts", 3, "needs certificates"},
		{"hsts below a second", cert + "    hsts: 10ms\n", "listen.tls.hsts", 6, "whole seconds"},
		{"hsts not a number", cert + "    hsts: forever\n", "listen.tls.hsts", 6, "number of seconds"},
		{"hsts absurd", cert + "    hsts: 99999999999\n", "listen.tls.hsts", 6, "more than"},
		{"rotation too fast", cert + "    ticket_rotation: 1s\n", "listen.tls.ticket_rotation", 6, "between"},
		{"lifetime below rotation", cert + "    ticket_rotation: 2h\n    ticket_lifetime: 1h\n", "listen.tls.ticket_lifetime", 7, "between ticket_rotation"},
		{"unknown key", cert + "    hstss: 1\n", "listen.tls.hstss", 6, `did you mean "hsts"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "t.yaml")
			var fe field.Errors
			if !errors.As(err, &fe) {
				t.Fatalf("want field errors, got %v", err)
			}
			for _, e := range fe {
				if e.Path == tc.path && strings.Contains(e.Msg, tc.msg) && e.Line == tc.line {
					return
				}
			}
			t.Fatalf("no error at %s line %d containing %q in: %v", tc.path, tc.line, tc.msg, err)
		})
	}
}

func TestListenRestartEqual(t *testing.T) {
	base := Defaults().Listen
	withCert := func(l ListenConfig, file string, hsts MaxAge) ListenConfig {
		l.TLS.Certificates = []TLSCertificate{{CertFile: file, KeyFile: file + ".key"}}
		l.TLS.HSTS = hsts
		return l
	}
	a := withCert(base, "a.pem", 0)
	if !a.RestartEqual(withCert(base, "b.pem", MaxAge(time.Hour))) {
		t.Error("other certificates or hsts are a reload, not a restart")
	}
	if a.RestartEqual(base) || base.RestartEqual(a) {
		t.Error("turning TLS on or off is a restart")
	}
	b := a
	b.TLS.TicketRotation = 2 * time.Hour
	if a.RestartEqual(b) {
		t.Error("ticket settings are a restart")
	}
	b = a
	b.TLS.SessionTickets = !a.TLS.SessionTickets
	if a.RestartEqual(b) {
		t.Error("session_tickets is a restart")
	}
	b = a
	b.Addr = ":9"
	if a.RestartEqual(b) {
		t.Error("the address is a restart")
	}
}
