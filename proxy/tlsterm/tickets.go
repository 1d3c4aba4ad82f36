package tlsterm

import (
	"crypto/rand"
	"time"
)

// ticketKeys are the session ticket keys, newest first: the first encrypts
// new tickets, all of them decrypt. Go's own rotation (without
// SetSessionTicketKeys) keeps a key for a week; this one keeps it for
// ticket_lifetime after it stopped encrypting, so a leaked key (a memory
// dump, a core file) opens a bounded window of sessions.
type ticketKeys struct {
	rotation, lifetime time.Duration
	keys               []ticketKey
}

type ticketKey struct {
	key     [32]byte
	retired time.Time // when a newer key took over encrypting; zero for the newest
}

// rotate makes a fresh key the one that encrypts and drops the keys
// retired more than lifetime ago. It returns the keys for
// tls.Config.SetSessionTicketKeys.
func (k *ticketKeys) rotate(now time.Time) [][32]byte {
	var fresh ticketKey
	rand.Read(fresh.key[:]) // never fails (crypto/rand panics rather)
	keep := []ticketKey{fresh}
	for i, old := range k.keys {
		if i == 0 {
			old.retired = now
		}
		if now.Sub(old.retired) <= k.lifetime {
			keep = append(keep, old)
		}
	}
	k.keys = keep
	out := make([][32]byte, len(keep))
	for i, x := range keep {
		out[i] = x.key
	}
	return out
}
