package tlsterm

import (
	"crypto/tls"
	"sync"
	"testing"
	"time"

	"flashgate/internal/tlstest"
)

// clock is a settable clock for the ticket rotation.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestSessionResumptionAcrossTicketRotation resumes sessions with real
// clients, TLS 1.3 and 1.2, across rotations inside the lifetime, and
// checks a ticket whose key aged out costs a full handshake again.
func TestSessionResumptionAcrossTicketRotation(t *testing.T) {
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		t.Run(tls.VersionName(v), func(t *testing.T) {
			ca := tlstest.NewCA(t)
			shop, _ := issue(t, ca, "shop", "shop.example.com")
			s := spec(shop)
			s.TicketRotation, s.TicketLifetime = time.Hour, 2*time.Hour
			clk := &clock{now: time.Now()}
			term := New(s, mustLoad(t, s), Options{Log: quiet, Now: clk.Now})
			addr := serve(t, term)
			client := func() *tls.Config {
				return &tls.Config{ServerName: "shop.example.com", RootCAs: ca.Pool(), MaxVersion: v,
					ClientSessionCache: tls.NewLRUClientSessionCache(8)}
			}
			resumes := func(cfg *tls.Config) bool {
				t.Helper()
				st, err := dial(t, addr, cfg)
				if err != nil {
					t.Fatal(err)
				}
				return st.DidResume
			}

			a := client()
			if resumes(a) {
				t.Fatal("the first handshake resumed")
			}
			if !resumes(a) {
				t.Fatal("the second handshake did not resume")
			}
			// One rotation: the key that issued a's ticket now only decrypts.
			b := client()
			resumes(b) // b's ticket: the key before the rotation
			clk.Add(time.Hour)
			term.rotateTickets()
			if !resumes(b) {
				t.Fatal("a ticket of the previous key did not resume within the lifetime")
			}

			// c's ticket ages out: its key retires at the next rotation
			// and is dropped once retired longer than the lifetime.
			c := client()
			resumes(c)
			for range 3 {
				clk.Add(time.Hour)
				term.rotateTickets()
			}
			clk.Add(time.Minute)
			term.rotateTickets()
			if resumes(c) {
				t.Fatal("a ticket whose key was retired longer than the lifetime still resumed")
			}
			if got := len(term.tickets.keys); got != 4 {
				t.Errorf("%d keys kept, want 4 (lifetime 2h / rotation 1h: the current one and those retired within 2h)", got)
			}
			if term.resumed.Value() != 2 || term.handshakes.Value() != 6 {
				t.Errorf("handshakes %d, resumed %d; want 6 and 2", term.handshakes.Value(), term.resumed.Value())
			}
		})
	}
}

// TestSessionTicketsOff: every handshake is a full one, whatever the
// client kept.
func TestSessionTicketsOff(t *testing.T) {
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		t.Run(tls.VersionName(v), func(t *testing.T) {
			ca := tlstest.NewCA(t)
			shop, _ := issue(t, ca, "shop", "shop.example.com")
			s := spec(shop)
			s.SessionTickets = false
			addr := serve(t, New(s, mustLoad(t, s), Options{Log: quiet}))
			cfg := &tls.Config{ServerName: "shop.example.com", RootCAs: ca.Pool(), MaxVersion: v, ClientSessionCache: tls.NewLRUClientSessionCache(8)}
			for i := range 3 {
				st, err := dial(t, addr, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if st.DidResume {
					t.Fatalf("handshake %d resumed with session_tickets off", i+1)
				}
			}
		})
	}
}
