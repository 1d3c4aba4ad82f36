package room

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"flashgate/conf"
)

func TestBuild(t *testing.T) {
	if r, errs := Build(conf.RoomConfig{}, 1000); r != nil || errs != nil {
		t.Fatalf("off: %v %v", r, errs)
	}
	r, errs := Build(conf.RoomConfig{Enabled: true}, 1_000_000)
	if len(errs) > 0 || r.OpensMs != 1_000_000-DefaultPrequeueOpens.Milliseconds() || r.AdmitPerMinute != DefaultAdmitPerMinute ||
		r.SessionMs != DefaultSession.Milliseconds() || !r.Lottery() || r.Difficulty != 0 {
		t.Fatalf("defaults: %+v %v", r, errs)
	}
	for _, c := range []struct {
		cfg   conf.RoomConfig
		field string
	}{
		{conf.RoomConfig{PrequeueOpens: -time.Second}, "waiting_room.prequeue_opens"},
		{conf.RoomConfig{AdmitPerMinute: -1}, "waiting_room.admit_per_minute"},
		{conf.RoomConfig{MaxActive: -1}, "waiting_room.max_active"},
		{conf.RoomConfig{Session: time.Millisecond}, "waiting_room.session"},
		{conf.RoomConfig{Order: "random"}, "waiting_room.order"},
		{conf.RoomConfig{Challenge: conf.RoomChallenge{Difficulty: 40}}, "waiting_room.challenge.difficulty"},
	} {
		c.cfg.Enabled = true
		r, errs := Build(c.cfg, 1000)
		if r != nil || len(errs) != 1 || errs[0].Path != c.field {
			t.Errorf("%+v: %v, want one error at %s", c.cfg, errs, c.field)
		}
	}
}

func TestTickets(t *testing.T) {
	tk, err := NewTickets([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewTickets([]byte("short")); err == nil {
		t.Fatal("a short secret is accepted")
	}
	id := ID{1, 2, 3, 4, 5, 6, 7, 8}
	tkt := tk.Append(nil, []byte("alice"), []byte("p1"), id, 42, 5000)
	if len(tkt) != TicketLen {
		t.Fatalf("length %d, want %d", len(tkt), TicketLen)
	}
	got, place, err := tk.Check(tkt, []byte("alice"), []byte("p1"), 4999)
	if err != nil || got != id || place != 42 {
		t.Fatalf("check: %v %v %d", err, got, place)
	}
	other, _ := NewTickets([]byte(strings.Repeat("o", 32)))
	flipped := append([]byte(nil), tkt...)
	flipped[3] ^= 1
	for _, c := range []struct {
		name          string
		ticket        []byte
		user, product string
		now           int64
		want          error
	}{
		{"another shopper's", tkt, "bob", "p1", 0, ErrForged},
		{"another sale's", tkt, "alice", "p2", 0, ErrForged},
		{"expired", tkt, "alice", "p1", 5000, ErrExpired},
		{"tampered", flipped, "alice", "p1", 0, ErrForged},
		{"another secret's", other.Append(nil, []byte("alice"), []byte("p1"), id, 42, 5000), "alice", "p1", 0, ErrForged},
		{"short", tkt[:10], "alice", "p1", 0, ErrMalformed},
		{"not base64url", append(tkt[:len(tkt)-1:len(tkt)-1], '*'), "alice", "p1", 0, ErrMalformed},
	} {
		if _, _, err := tk.Check(c.ticket, []byte(c.user), []byte(c.product), c.now); err != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if h := id.AppendHex(nil); string(h) != "0102030405060708" {
		t.Errorf("hex %s", h)
	} else if back, ok := ParseID(string(h)); !ok || back != id {
		t.Errorf("ParseID(%s) = %v %v", h, back, ok)
	}
}

func TestTicketCheckAllocs(t *testing.T) {
	tk, err := NewTickets([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	tkt := tk.Append(nil, []byte("alice"), []byte("p1"), ID{1, 2, 3, 4, 5, 6, 7, 8}, 42, 5000)
	alice, p1 := []byte("alice"), []byte("p1")
	if n := testing.AllocsPerRun(100, func() { tk.Check(tkt, alice, p1, 0) }); n != 0 {
		t.Errorf("Check allocates %.1f times", n)
	}
}

func TestFrontierAndETA(t *testing.T) {
	s := State{Frozen: true, Base: 10, BaseMs: 60_000, Rate: 120} // 2 per second from 60 s
	for _, c := range []struct{ now, n int64 }{{0, 10}, {60_000, 10}, {60_499, 10}, {60_500, 11}, {61_000, 12}, {120_000, 130}} {
		if got := s.Frontier(c.now); got != c.n {
			t.Errorf("N(%d) = %d, want %d", c.now, got, c.n)
		}
	}
	if eta := s.ETA(14, 61_000); eta != 1000 { // place 14 at 62 s
		t.Errorf("ETA(14) = %d, want 1000", eta)
	}
	if eta := s.ETA(11, 30_000); eta != 30_500 { // before the line starts
		t.Errorf("ETA(11) before the start = %d", eta)
	}
	if eta := s.ETA(12, 61_000); eta != 0 {
		t.Errorf("ETA of a place inside the line = %d", eta)
	}
	s.Paused = true
	if s.Frontier(120_000) != 10 || s.ETA(14, 120_000) != -1 {
		t.Errorf("paused: N %d, ETA %d", s.Frontier(120_000), s.ETA(14, 120_000))
	}
}

// TestRank: the order is HMAC-SHA256(key, id) ascending — recomputed here
// from the definition — and does not depend on the order the ids come in.
func TestRank(t *testing.T) {
	key, commit := NewKey()
	if Commit(key) != commit {
		t.Fatal("commit does not match the key")
	}
	ids := []string{"00000000000000aa", "00000000000000bb", "00000000000000cc", "00000000000000dd"}
	got, err := Rank(key, ids)
	if err != nil {
		t.Fatal(err)
	}
	rev := slices.Clone(ids)
	slices.Reverse(rev)
	if again, _ := Rank(key, rev); !slices.Equal(got, again) {
		t.Fatal("the ranking depends on the input order")
	}
	kb, _ := hex.DecodeString(key)
	mac := func(id string) string {
		m := hmac.New(sha256.New, kb)
		m.Write([]byte(id))
		return string(m.Sum(nil))
	}
	for i := 1; i < len(got); i++ {
		if mac(got[i-1]) >= mac(got[i]) {
			t.Fatalf("not ascending by HMAC at %d", i)
		}
	}
	if _, err := Rank("not hex", ids); err == nil {
		t.Fatal("a bad key is accepted")
	}
}
