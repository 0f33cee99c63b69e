package broadcast

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cachecast/cachecast/broadcast/internal/memstore"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
)

// stores are the two Stores the tests run on: the one on disk and the
// in-memory one.
var stores = []struct {
	name string
	open func(t *testing.T) testStore
}{
	{"disk", func(t *testing.T) testStore {
		st, err := store.Open(store.DefaultOptions(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
	{"memory", func(t *testing.T) testStore { return memstore.New() }},
}

// peerRecord is the record seq of origin, as that origin's store stamped
// it: a record a peer pushes.
func peerRecord(t *testing.T, origin, seq uint64) []byte {
	t.Helper()
	m := record.Message{Topic: "prices", Key: "k", Value: []byte{byte(seq)}}
	b := make([]byte, m.EncodedSize())
	return b[:record.Encode(b, &m, record.Stamp{Origin: origin, Seq: seq, HLC: record.MakeHLC(1000+int64(seq), 0)})]
}

// TestStoresAgree holds the in-memory store the unit tests run on to the
// store on disk, on what a Node relies on: appends in order and the
// errors of a duplicate, a gap and bad bytes; reads of a range; the
// vector; the change channels; a snapshot taken by a fresh store, which
// moves the origins on and answers a read below the mark as recycled.
func TestStoresAgree(t *testing.T) {
	t.Parallel()
	const peer = 0x77
	appends := []struct {
		name string
		seq  uint64
		want error
	}{
		{"first", 1, nil},
		{"again", 1, store.ErrDuplicate},
		{"past a gap", 3, store.ErrOutOfOrder},
		{"next", 2, nil},
		{"then the one past the gap", 3, nil},
	}
	for _, impl := range stores {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			st := impl.open(t)
			changed, own := st.Changed(), st.OwnChanged()
			for _, a := range appends {
				if _, err := st.AppendRecord(peerRecord(t, peer, a.seq)); !errors.Is(err, a.want) && (err != nil || a.want != nil) {
					t.Fatalf("append %s (seq %d): %v, want %v", a.name, a.seq, err, a.want)
				}
			}
			bad := peerRecord(t, peer, 4)
			bad[len(bad)-1] ^= 1
			if _, err := st.AppendRecord(bad); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("append of a flipped byte: %v, want ErrCorrupt", err)
			}
			assertClosed(t, changed, "Changed after a peer's record")
			assertOpen(t, own, "OwnChanged after a peer's record")
			if _, err := st.Publish(&record.Message{Topic: "prices", Key: "own", Value: []byte("v")}); err != nil {
				t.Fatal(err)
			}
			assertClosed(t, own, "OwnChanged after a publish")
			if v := st.Vector(); len(v) != 2 || v[peer] != 3 || v[st.Origin()] != 1 || st.LastSeq(peer) != 3 || st.LogLast(peer) != 3 {
				t.Fatalf("vector %v, LastSeq %d, LogLast %d; want the peer at 3 and this node at 1", v, st.LastSeq(peer), st.LogLast(peer))
			}
			var seqs []uint64
			next, err := st.ReadOrigin(peer, 2, 10, func(r record.Record) error {
				if !bytes.Equal(r, peerRecord(t, peer, r.Seq())) {
					t.Fatalf("seq %d read back changed", r.Seq())
				}
				seqs = append(seqs, r.Seq())
				return nil
			})
			if err != nil || next != 4 || len(seqs) != 2 {
				t.Fatalf("read 2-10: seqs %v, next %d, %v; want 2 and 3, next 4", seqs, next, err)
			}
			fresh := impl.open(t)
			var snap bytes.Buffer
			if err := st.SnapshotToVersion(&snap, int(record.Version4)); err != nil {
				t.Fatal(err)
			}
			moved, err := fresh.Bootstrap(&snap)
			if err != nil || moved[peer] != 3 || moved[st.Origin()] != 1 {
				t.Fatalf("bootstrap moved %v, %v; want the peer to 3 and the origin to 1", moved, err)
			}
			if _, err := fresh.ReadOrigin(peer, 1, 3, func(record.Record) error { return nil }); !errors.Is(err, store.ErrRecycled) {
				t.Fatalf("read below a bootstrap's mark: %v, want ErrRecycled", err)
			}
			if fresh.Digest() != st.Digest() {
				t.Fatal("the bootstrapped view differs from the snapshot's")
			}
			if _, err := fresh.AppendRecord(peerRecord(t, peer, 4)); err != nil {
				t.Fatalf("the record after the mark: %v", err)
			}
		})
	}
}

func assertClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Fatalf("%s: not closed", what)
	}
}

func assertOpen(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s: closed", what)
	default:
	}
}
