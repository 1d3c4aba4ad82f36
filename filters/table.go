package filters

import "hash/maphash"

// slot is one entry of an open-addressing table: 24 bytes, no pointers, so a
// million of them are one flat allocation the garbage collector never scans.
// a != 0 marks a used slot; what a and b mean is up to the owner (limiter:
// last access and excess; conn zone: a is the count).
type slot struct {
	key [16]byte
	a   uint32
	b   uint32
}

// table is a linear-probing hash table of slots with backward-shift deletion
// (no tombstones, so probe sequences stay short however much churn there is).
// It is not safe for concurrent use; owners shard it and lock each shard.
// The capacity need not be a power of two (growth is by 1.5x to keep memory
// per key between 32 and 48 bytes); the home slot is found by multiplying the
// hash into the range.
type table struct {
	slots []slot
	n     int
	seed  maphash.Seed
}

const (
	tableMinCap = 8
	// A table is grown before it is 3/4 full; linear probing gets slow past that.
	tableLoadNum, tableLoadDen = 3, 4
)

// capFor is the capacity that holds n keys at the maximum load.
func capFor(n int) int {
	c := (n*tableLoadDen + tableLoadNum - 1) / tableLoadNum
	if c <= n {
		c = n + 1
	}
	return max(c, tableMinCap)
}

func (t *table) full(n int) bool { return n*tableLoadDen > len(t.slots)*tableLoadNum }

// hash is keyed with a random seed per table owner: clients choose their
// addresses (a /64 holds 2^64 of them), and a predictable hash would let them
// pile every key into one probe sequence.
func (t *table) hash(k *[16]byte) uint64 { return maphash.Bytes(t.seed, k[:]) }

func (t *table) home(h uint64) int {
	return int((h & 0xffffffff) * uint64(len(t.slots)) >> 32)
}

// find returns the slot holding k, or the free slot where k belongs. The
// table always has a free slot (load <= 3/4), so the loop ends.
func (t *table) find(k *[16]byte, h uint64) (int, bool) {
	i := t.home(h)
	for {
		s := &t.slots[i]
		if s.a == 0 {
			return i, false
		}
		if s.key == *k {
			return i, true
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// remove empties slot i and shifts later members of its cluster back so that
// every key stays reachable from its home slot.
func (t *table) remove(i int) {
	c := len(t.slots)
	j := i
	for {
		if j++; j == c {
			j = 0
		}
		s := &t.slots[j]
		if s.a == 0 {
			break
		}
		k := t.home(t.hash(&s.key))
		// s stays if its home lies cyclically in (i, j].
		if i <= j {
			if i < k && k <= j {
				continue
			}
		} else if i < k || k <= j {
			continue
		}
		t.slots[i] = *s
		i = j
	}
	t.slots[i] = slot{}
	t.n--
}

// resize rehashes into a new array of capacity c (>= capFor(t.n)).
func (t *table) resize(c int) {
	old := t.slots
	t.slots = make([]slot, c)
	for i := range old {
		if old[i].a != 0 {
			j, _ := t.find(&old[i].key, t.hash(&old[i].key))
			t.slots[j] = old[i]
		}
	}
}

// grow makes room for one more key, up to capacity limit; false when the
// table is as large as allowed.
func (t *table) grow(limit int) bool {
	if len(t.slots) >= limit {
		return false
	}
	t.resize(min(max(len(t.slots)+len(t.slots)/2, tableMinCap), limit))
	return true
}

// shrink gives memory back after a flood: below 1/4 load the table is
// rebuilt at 3/8 load.
func (t *table) shrink() {
	if len(t.slots) > tableMinCap && t.n*4 < len(t.slots) {
		t.resize(max(t.n*8/3+1, tableMinCap))
	}
}
