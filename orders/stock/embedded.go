package stock

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// snapshotFile is the embedded server's state inside Options.DataDir.
const snapshotFile = "stock.json"

// snapshot is the embedded server's sk:* keys. It exists because miniredis
// has no RDB/AOF; it is for the zero-setup demo only.
//
// Clean is set only by the save on Close, when no client is connected: the
// stock and buyer keys are then exact. A periodic save (Options.SaveEvery)
// is not clean: sales continue after it, and a crash before the next save
// forgets them. Open therefore drops the stock and buyer keys of a snapshot
// that is not clean, and warm-up rebuilds those sales from the ledger.
type snapshot struct {
	Version int           `json:"version"`
	SavedMs int64         `json:"savedMs"`
	Clean   bool          `json:"clean,omitempty"`
	Keys    []snapshotKey `json:"keys"`
}

type snapshotKey struct {
	Key  string `json:"key"`
	Type string `json:"type"` // string, hash, stream or zset
	// ExpireAtMs is absolute so that time spent stopped counts against TTLs.
	ExpireAtMs int64             `json:"expireAtMs,omitempty"`
	Value      string            `json:"value,omitempty"`
	Hash       map[string]string `json:"hash,omitempty"`
	Stream     []streamEntry     `json:"stream,omitempty"`
	Zset       map[string]int64  `json:"zset,omitempty"` // member -> score (the due set's are unix ms)
}

type streamEntry struct {
	ID     string   `json:"id"`
	Values []string `json:"values"`
}

// saveSnapshot writes the sk:* keys to dir. clean must only be set when no
// client is connected. While clients run (a periodic save), keys are read
// one by one: the snapshot is not a point in time, and a key that vanishes
// while it is taken (an expired token, a deleted outbox) is skipped.
func saveSnapshot(m *miniredis.Miniredis, dir string, clean bool) error {
	now := time.Now()
	snap := snapshot{Version: 1, SavedMs: now.UnixMilli(), Clean: clean, Keys: []snapshotKey{}}
	for _, k := range m.Keys() {
		if !snapshotted(k) {
			continue
		}
		sk := snapshotKey{Key: k, Type: m.Type(k)}
		if ttl := m.TTL(k); ttl > 0 {
			sk.ExpireAtMs = now.Add(ttl).UnixMilli()
		}
		switch sk.Type {
		case "": // gone since Keys
			continue
		case "string":
			v, err := m.Get(k)
			if errors.Is(err, miniredis.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("stock: snapshot %s: %w", k, err)
			}
			sk.Value = v
		case "hash":
			fields, err := m.HKeys(k)
			if errors.Is(err, miniredis.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("stock: snapshot %s: %w", k, err)
			}
			sk.Hash = make(map[string]string, len(fields))
			for _, f := range fields {
				sk.Hash[f] = m.HGet(k, f)
			}
		case "stream":
			entries, err := m.Stream(k)
			if errors.Is(err, miniredis.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("stock: snapshot %s: %w", k, err)
			}
			sk.Stream = make([]streamEntry, len(entries))
			for i, e := range entries {
				sk.Stream[i] = streamEntry{ID: e.ID, Values: e.Values}
			}
		case "zset":
			members, err := m.ZMembers(k)
			if errors.Is(err, miniredis.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("stock: snapshot %s: %w", k, err)
			}
			sk.Zset = make(map[string]int64, len(members))
			for _, mb := range members {
				if score, err := m.ZScore(k, mb); err == nil {
					sk.Zset[mb] = int64(score)
				}
			}
		default:
			// The stock package writes no other types; refusing is better
			// than silently dropping state on the next restart.
			return fmt.Errorf("stock: snapshot %s: unsupported type %q", k, sk.Type)
		}
		snap.Keys = append(snap.Keys, sk)
	}
	b, err := json.Marshal(&snap)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, snapshotFile), b)
}

// writeAtomic replaces path with b so that a crash leaves either the old or
// the new file, never a torn one.
func writeAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("stock: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("stock: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("stock: save %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename itself durable
		d.Close()
	}
	return nil
}

// loadSnapshot loads dir's snapshot into m. A snapshot that is not clean
// (see snapshot) comes without its stock and buyer keys: lost reports how
// many stock keys were dropped, i.e. sales warm-up must rebuild from the
// ledger.
func loadSnapshot(m *miniredis.Miniredis, dir string) (lost int, err error) {
	path := filepath.Join(dir, snapshotFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("stock: load %s: %w", path, err)
	}
	var snap snapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return 0, fmt.Errorf("stock: load %s: %w", path, err)
	}
	if snap.Version != 1 {
		return 0, fmt.Errorf("stock: load %s: unknown version %d", path, snap.Version)
	}
	now := time.Now().UnixMilli()
	for _, k := range snap.Keys {
		if k.ExpireAtMs != 0 && k.ExpireAtMs <= now {
			continue
		}
		if !snap.Clean {
			switch lostKind(k.Key) {
			case "stock":
				lost++
				continue
			case "buyer":
				continue
			}
		}
		switch k.Type {
		case "string":
			err = m.Set(k.Key, k.Value)
		case "hash":
			for f, v := range k.Hash {
				m.HSet(k.Key, f, v)
			}
		case "stream":
			for _, e := range k.Stream {
				if _, err = m.XAdd(k.Key, e.ID, e.Values); err != nil {
					break
				}
			}
		case "zset":
			for mb, score := range k.Zset {
				if _, err = m.ZAdd(k.Key, float64(score), mb); err != nil {
					break
				}
			}
		default:
			err = fmt.Errorf("unsupported type %q", k.Type)
		}
		if err != nil {
			return 0, fmt.Errorf("stock: load %s: key %s: %w", path, k.Key, err)
		}
		if k.ExpireAtMs != 0 {
			m.SetTTL(k.Key, time.Duration(k.ExpireAtMs-now)*time.Millisecond)
		}
	}
	return lost, nil
}
