package index

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

func openTestTopics(t testing.TB, dir string, chunk int) *Topics {
	t.Helper()
	ti, err := OpenTopics(dir, chunk, 2, nil)
	if err != nil {
		t.Fatalf("openTopicIndexes: %v", err)
	}
	return ti
}

func openTestOrigins(t testing.TB, dir string, chunk int) *Origins {
	t.Helper()
	o, err := OpenOrigins(dir, chunk, 2, nil)
	if err != nil {
		t.Fatalf("openOriginIndexes: %v", err)
	}
	return o
}

// idxEntry is the test entry for position pos.
func idxEntry(pos int64) Entry {
	return Entry{Pos: pos, Size: uint32(pos%1000) + 48, TagHash: uint32(pos * 31), HLC: uint64(pos) * 10}
}

func TestIndexEntryEncoding(t *testing.T) {
	for _, e := range []Entry{
		{Pos: 0},
		{Pos: 8, Size: 48, TagHash: 1, HLC: 1},
		{Pos: 1<<63 - 2, Size: 1<<32 - 1, TagHash: 1<<32 - 1, HLC: 1<<64 - 1},
	} {
		var b [topicEntrySize]byte
		encodeIndexEntry(b[:], e)
		if fsys.IsZero(b[:]) {
			t.Errorf("%+v encodes to zeros", e)
		}
		got, err := decodeIndexEntry(b[:])
		if err != nil || got != e {
			t.Errorf("round trip of %+v: %+v, %v", e, got, err)
		}
	}
	if _, err := decodeIndexEntry(make([]byte, topicEntrySize)); !errors.Is(err, record.ErrCorrupt) {
		t.Errorf("zero entry: %v, want ErrCorrupt", err)
	}
}

func TestTopicIndexDirName(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, tc := range []struct{ topic, want string }{
		{"orders", "orders"},
		{"prices.eu-1_v2", "prices.eu-1_v2"},
		{".", "%2E"},
		{"..", "%2E."},
		{".hidden", "%2Ehidden"},
		{"a/b", "a%2Fb"},
		{"50%", "50%25"},
		{"#x", "%23x"},
		{"é", "%C3%A9"},
		{"a b\x00", "a%20b%00"},
		{strings.Repeat("a", maxTopicDirName), strings.Repeat("a", maxTopicDirName)},
		{long, ""}, // hashed
		{strings.Repeat("/", 70), ""},
	} {
		got := topicDirName(tc.topic)
		if tc.want == "" {
			if !strings.HasPrefix(got, "#") || len(got) != 65 {
				t.Errorf("topicDirName(%.20q...) = %q, want a hashed name", tc.topic, got)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("topicDirName(%q) = %q, want %q", tc.topic, got, tc.want)
		}
		if back, ok := parseTopicDirName(got); !ok || back != tc.topic {
			t.Errorf("parseTopicDirName(%q) = %q, %v", got, back, ok)
		}
	}
	for _, name := range []string{"", "%", "%4", "%zz", "%41", "%2e", ".x", "#abc", "a%2"} {
		if topic, ok := parseTopicDirName(name); ok {
			t.Errorf("parseTopicDirName(%q) accepted as %q", name, topic)
		}
	}
}

func TestTopicIndexAppendAndRead(t *testing.T) {
	dir := t.TempDir()
	ti := openTestTopics(t, dir, 4)
	defer ti.Close()
	if ti.Get("a") != nil || len(ti.Names()) != 0 || ti.LastPos() != -1 {
		t.Fatal("a new set is not empty")
	}
	// Interleave three topics; offsets count per topic.
	want := map[string][]Entry{}
	names := []string{"a", "b.c", "long/" + strings.Repeat("z", 250)}
	for pos := int64(0); pos < 300; pos += 8 {
		topic := names[rand.IntN(len(names))]
		off, err := ti.Append([]byte(topic), idxEntry(pos))
		if err != nil {
			t.Fatal(err)
		}
		if off != uint64(len(want[topic])) {
			t.Fatalf("offset %d for the %d-th entry of %q", off, len(want[topic]), topic)
		}
		want[topic] = append(want[topic], idxEntry(pos))
	}
	checkTopics := func(ti *Topics) {
		t.Helper()
		if got, w := ti.Names(), slices.Sorted(maps.Keys(want)); !slices.Equal(got, w) {
			t.Fatalf("topics() = %q, want %q", got, w)
		}
		if ti.LastPos() != 296 {
			t.Fatalf("lastPos = %d, want 296", ti.LastPos())
		}
		for topic, es := range want {
			x := ti.Get(topic)
			if x == nil {
				t.Fatalf("get(%q) = nil", topic)
			}
			if x.Len() != uint64(len(es)) || x.First() != 0 {
				t.Fatalf("%q: len %d first %d, want %d 0", topic, x.Len(), x.First(), len(es))
			}
			for off, e := range es {
				got, err := x.Entry(uint64(off))
				if err != nil || got != e {
					t.Fatalf("%q entry %d = %+v, %v; want %+v", topic, off, got, err, e)
				}
			}
			if _, err := x.Entry(uint64(len(es))); !errors.Is(err, errs.ErrBeyondEnd) {
				t.Fatalf("%q entry at len: %v", topic, err)
			}
		}
	}
	checkTopics(ti)
	if err := ti.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := ti.Close(); err != nil {
		t.Fatal(err)
	}
	ti = openTestTopics(t, dir, 1024)
	defer ti.Close()
	checkTopics(ti)
	// Appending after reopen continues the offsets.
	off, err := ti.Append([]byte("a"), idxEntry(1000))
	if err != nil || off != uint64(len(want["a"])) {
		t.Fatalf("append after reopen: %d, %v", off, err)
	}
	// The hashed topic keeps its name in a file beside its directory.
	if _, err := os.Stat(filepath.Join(dir, topicDirName(names[2])+topicNameSuffix)); err != nil {
		t.Fatal(err)
	}
}

func TestTopicIndexAppendErrors(t *testing.T) {
	ti := openTestTopics(t, t.TempDir(), 4)
	if _, err := ti.Append([]byte("t"), idxEntry(100)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		topic string
		e     Entry
		want  error
	}{
		{"same position", "t", idxEntry(100), errs.ErrDuplicate},
		{"earlier position", "t", idxEntry(50), errs.ErrDuplicate},
		{"negative position", "t", Entry{Pos: -1}, record.ErrInvalid},
		{"empty topic", "", idxEntry(200), record.ErrInvalid},
	} {
		if _, err := ti.Append([]byte(tc.topic), tc.e); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if x := ti.Get("t"); x.Len() != 1 {
		t.Errorf("refused appends changed the index: len %d", x.Len())
	}
	if ti.Get("") != nil {
		t.Error("a refused topic was created")
	}
	ti.Close()
	if _, err := ti.Append([]byte("t"), idxEntry(300)); !errors.Is(err, errs.ErrClosed) {
		t.Errorf("append after close: %v", err)
	}
	if _, err := ti.Get("t").Entry(0); !errors.Is(err, errs.ErrClosed) {
		t.Errorf("entry after close: %v", err)
	}
}

// fillTopics appends positions 0, 8, 16, ... < 8*n round-robin to topics
// "t0".."t{k-1}" and returns the positions per topic.
func fillTopics(t testing.TB, ti *Topics, n, k int) map[string][]int64 {
	t.Helper()
	got := map[string][]int64{}
	for i := range n {
		topic := fmt.Sprintf("t%d", i%k)
		pos := int64(8 * i)
		if _, err := ti.Append([]byte(topic), idxEntry(pos)); err != nil {
			t.Fatal(err)
		}
		got[topic] = append(got[topic], pos)
	}
	return got
}

func TestTopicIndexTruncate(t *testing.T) {
	const n, k, chunk = 120, 3, 4 // 40 entries per topic, 10 chunks each
	for _, tc := range []struct {
		name string
		pos  int64
	}{
		{"everything", 0},
		{"mid chunk", 8 * 61},
		{"chunk boundary", 8 * 48}, // topic t0's 16th entry: offset 16
		{"last entry", 8 * (n - 1)},
		{"nothing", 8 * n},
		{"unaligned", 8*50 + 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ti := openTestTopics(t, dir, chunk)
			all := fillTopics(t, ti, n, k)
			if err := ti.Truncate(tc.pos); err != nil {
				t.Fatal(err)
			}
			check := func(ti *Topics) {
				t.Helper()
				wantLast := int64(-1)
				for topic, ps := range all {
					keep := 0
					for keep < len(ps) && ps[keep] < tc.pos {
						keep++
					}
					x := ti.Get(topic)
					if x.Len() != uint64(keep) {
						t.Fatalf("%s: len %d, want %d", topic, x.Len(), keep)
					}
					for off := range keep {
						if e, err := x.Entry(uint64(off)); err != nil || e != idxEntry(ps[off]) {
							t.Fatalf("%s entry %d: %+v %v", topic, off, e, err)
						}
					}
					if keep > 0 {
						wantLast = max(wantLast, ps[keep-1])
					}
				}
				if ti.LastPos() != wantLast {
					t.Fatalf("lastPos %d, want %d", ti.LastPos(), wantLast)
				}
			}
			check(ti)
			ti.Close()
			ti = openTestTopics(t, dir, chunk)
			defer ti.Close()
			check(ti)
			// Re-indexing after the cut appends again.
			if _, err := ti.Append([]byte("t0"), idxEntry(max(tc.pos, 8*n)+8)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestTopicIndexDropBefore(t *testing.T) {
	const n, k, chunk = 60, 3, 4
	for _, pos := range []int64{0, 8 * 11, 8 * 12, 8*41 + 4, 8 * n, 1 << 40} {
		dir := t.TempDir()
		ti := openTestTopics(t, dir, chunk)
		all := fillTopics(t, ti, n, k)
		if err := ti.DropBefore(pos); err != nil {
			t.Fatal(err)
		}
		for _, reopen := range []bool{false, true} {
			if reopen {
				ti.Close()
				ti = openTestTopics(t, dir, chunk)
			}
			for topic, ps := range all {
				// Whole chunks before the first entry at or after pos go,
				// never the last chunk.
				before := uint64(0)
				for before < uint64(len(ps)) && ps[before] < pos {
					before++
				}
				wantFirst := min(before/chunk*chunk, uint64(len(ps)-1)/chunk*chunk)
				x := ti.Get(topic)
				if x.First() != wantFirst || x.Len() != uint64(len(ps)) {
					t.Fatalf("pos %d %s: first %d len %d, want %d %d", pos, topic, x.First(), x.Len(), wantFirst, len(ps))
				}
				if wantFirst > 0 {
					if _, err := x.Entry(wantFirst - 1); !errors.Is(err, errs.ErrRecycled) {
						t.Fatalf("entry below first: %v", err)
					}
				}
				for off := x.First(); off < x.Len(); off++ {
					if e, err := x.Entry(off); err != nil || e != idxEntry(ps[off]) {
						t.Fatalf("%s entry %d: %+v %v", topic, off, e, err)
					}
				}
			}
			if ti.LastPos() != 8*(n-1) {
				t.Fatalf("lastPos %d after dropping", ti.LastPos())
			}
		}
		if pos == 8*11 && (ti.Get("t0").First() != 4 || ti.Get("t2").First() != 0) {
			t.Fatal("topics should drop independently")
		}
		ti.Close()
	}
}

func TestTopicIndexSearchHLC(t *testing.T) {
	ti := openTestTopics(t, t.TempDir(), 4)
	defer ti.Close()
	// HLCs: 10, 20, ..., 500 with one out-of-order record (a late arrival).
	hlcs := make([]uint64, 50)
	for i := range hlcs {
		hlcs[i] = uint64(i+1) * 10
	}
	hlcs[30] = 95
	for i, h := range hlcs {
		if _, err := ti.Append([]byte("t"), Entry{Pos: int64(i) * 8, Size: 48, HLC: h}); err != nil {
			t.Fatal(err)
		}
	}
	x := ti.Get("t")
	for _, tc := range []struct {
		h    uint64
		want uint64
	}{
		{0, 0}, {10, 0}, {11, 1}, {100, 9}, {250, 24}, {500, 49}, {501, 50}, {1 << 63, 50},
	} {
		if got := x.SearchHLC(tc.h); got != tc.want {
			t.Errorf("searchHLC(%d) = %d, want %d", tc.h, got, tc.want)
		}
	}
	// After retention, the search covers what is left.
	if err := ti.DropBefore(8 * 20); err != nil {
		t.Fatal(err)
	}
	if got := x.SearchHLC(0); got != x.First() || got != 20 {
		t.Errorf("searchHLC after drop = %d, first %d", got, x.First())
	}
}

func TestTopicIndexIgnoresStrangers(t *testing.T) {
	dir := t.TempDir()
	ti := openTestTopics(t, dir, 4)
	fillTopics(t, ti, 10, 2)
	ti.Close()
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o600)
	os.Mkdir(filepath.Join(dir, "%zz"), 0o700)
	os.Mkdir(filepath.Join(dir, "#deadbeef"), 0o700) // hashed name without its name file
	os.Mkdir(filepath.Join(dir, "empty"), 0o700)     // a crash right after mkdir
	ti = openTestTopics(t, dir, 4)
	defer ti.Close()
	if got := ti.Names(); !slices.Equal(got, []string{"t0", "t1"}) {
		t.Fatalf("topics %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "empty")); !os.IsNotExist(err) {
		t.Errorf("empty topic directory not removed: %v", err)
	}
}

// TestTopicIndexConcurrent runs one writer over several topics (new ones
// appearing), readers on every topic and a syncer, under -race.
func TestTopicIndexConcurrent(t *testing.T) {
	ti := openTestTopics(t, t.TempDir(), 8)
	defer ti.Close()
	const n, k = 1500, 5
	var done atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 2))
			for !done.Load() {
				topic := fmt.Sprintf("t%d", rng.IntN(k))
				x := ti.Get(topic)
				if x == nil {
					continue
				}
				l := x.Len()
				if l == 0 {
					errc <- fmt.Errorf("topic %s visible without entries", topic)
					return
				}
				off := rng.Uint64N(l)
				e, err := x.Entry(off)
				if err != nil {
					errc <- err
					return
				}
				// Position 8*i went to topic i%k as its (i/k)-th entry.
				if want := idxEntry(int64(8 * (off*k + uint64(topic[1]-'0')))); e != want {
					errc <- fmt.Errorf("%s entry %d = %+v, want %+v", topic, off, e, want)
					return
				}
				ti.Names()
				ti.LastPos()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			if err := ti.Sync(); err != nil {
				errc <- err
				return
			}
		}
	}()
	fillTopics(t, ti, n, k)
	done.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

func TestOriginIndexPut(t *testing.T) {
	type op struct {
		origin, seq uint64
		pos         int64
		want        error
	}
	for _, tc := range []struct {
		name string
		ops  []op
		last map[uint64]uint64
	}{
		{"in order", []op{{1, 1, 0, nil}, {1, 2, 8, nil}, {1, 3, 16, nil}}, map[uint64]uint64{1: 3}},
		{"new origin mid-sequence", []op{{7, 500, 0, nil}, {7, 501, 8, nil}}, map[uint64]uint64{7: 501}},
		{"duplicate", []op{{1, 1, 0, nil}, {1, 2, 8, nil}, {1, 2, 16, errs.ErrDuplicate}, {1, 1, 24, errs.ErrDuplicate}}, map[uint64]uint64{1: 2}},
		{"below a mid-sequence start", []op{{7, 500, 0, nil}, {7, 3, 8, errs.ErrDuplicate}}, map[uint64]uint64{7: 500}},
		{"gap", []op{{1, 1, 0, nil}, {1, 3, 8, errs.ErrOutOfOrder}, {1, 2, 16, nil}}, map[uint64]uint64{1: 2}},
		{"zero origin", []op{{0, 1, 0, record.ErrInvalid}}, map[uint64]uint64{}},
		{"zero seq", []op{{1, 0, 0, record.ErrInvalid}}, map[uint64]uint64{}},
		{"negative position", []op{{1, 1, -8, record.ErrInvalid}}, map[uint64]uint64{}},
		{"position going back", []op{{1, 1, 16, nil}, {1, 2, 8, record.ErrInvalid}}, map[uint64]uint64{1: 1}},
		{"two origins", []op{{1, 1, 0, nil}, {2, 1, 8, nil}, {1, 2, 16, nil}, {2, 2, 24, nil}, {2, 3, 32, nil}},
			map[uint64]uint64{1: 2, 2: 3}},
		{"max origin", []op{{1<<64 - 1, 1, 0, nil}}, map[uint64]uint64{1<<64 - 1: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := openTestOrigins(t, dir, 4)
			held := map[[2]uint64]int64{}
			for _, op := range tc.ops {
				err := o.Put(op.origin, op.seq, op.pos)
				if !errors.Is(err, op.want) || (op.want == nil) != (err == nil) {
					t.Fatalf("put(%d, %d, %d) = %v, want %v", op.origin, op.seq, op.pos, err, op.want)
				}
				if err == nil {
					held[[2]uint64{op.origin, op.seq}] = op.pos
				}
			}
			for _, reopen := range []bool{false, true} {
				if reopen {
					o.Close()
					o = openTestOrigins(t, dir, 4)
				}
				if v := o.Vector(); !maps.Equal(v, tc.last) {
					t.Fatalf("vector %v, want %v", v, tc.last)
				}
				for origin, last := range tc.last {
					if got := o.Last(origin); got != last {
						t.Fatalf("last(%x) = %d, want %d", origin, got, last)
					}
				}
				for k, pos := range held {
					if got, ok := o.Get(k[0], k[1]); !ok || got != pos {
						t.Fatalf("get(%x, %d) = %d, %v; want %d", k[0], k[1], got, ok, pos)
					}
				}
				if _, ok := o.Get(1, 99); ok {
					t.Fatal("get of a seq never put")
				}
				if o.Last(12345) != 0 {
					t.Fatal("last of an unknown origin")
				}
			}
			o.Close()
		})
	}
}

func TestOriginIndexAcrossChunks(t *testing.T) {
	dir := t.TempDir()
	o := openTestOrigins(t, dir, 8)
	// Origin 5 starts at seq 1000 (bootstrapped), origin 6 at 1.
	pos := int64(0)
	want := map[[2]uint64]int64{}
	for i := range 200 {
		for _, origin := range []uint64{5, 6} {
			seq := uint64(i + 1)
			if origin == 5 {
				seq += 999
			}
			if err := o.Put(origin, seq, pos); err != nil {
				t.Fatal(err)
			}
			want[[2]uint64{origin, seq}] = pos
			pos += 8
		}
	}
	o.Close()
	if files := chunkFiles(t, filepath.Join(dir, originDirName(5))); len(files) != 25 || files[0] != 1000 {
		t.Fatalf("origin 5 chunk files %v", files)
	}
	o = openTestOrigins(t, dir, 8)
	defer o.Close()
	for k, p := range want {
		if got, ok := o.Get(k[0], k[1]); !ok || got != p {
			t.Fatalf("get(%d, %d) = %d %v, want %d", k[0], k[1], got, ok, p)
		}
	}
	if v := o.Vector(); !maps.Equal(v, map[uint64]uint64{5: 1199, 6: 200}) {
		t.Fatalf("vector %v", v)
	}
	if o.LastPos() != pos-8 {
		t.Fatalf("lastPos %d, want %d", o.LastPos(), pos-8)
	}
	if _, ok := o.Get(5, 999); ok {
		t.Fatal("seq before the first one held")
	}
}

func TestOriginIndexTruncateAndDrop(t *testing.T) {
	// Origin 1 holds seqs 1..40 at positions 0, 16, 32, ...;
	// origin 2 holds seqs 101..140 at 8, 24, 40, ... (started mid-sequence).
	setup := func(t *testing.T) (*Origins, string) {
		dir := t.TempDir()
		o := openTestOrigins(t, dir, 4)
		for i := range int64(40) {
			if err := o.Put(1, uint64(i+1), 16*i); err != nil {
				t.Fatal(err)
			}
			if err := o.Put(2, uint64(i+101), 16*i+8); err != nil {
				t.Fatal(err)
			}
		}
		return o, dir
	}
	for _, tc := range []struct {
		name        string
		truncate    int64 // -1: none
		drop        int64 // -1: none
		last1       uint64
		last2       uint64
		first1      uint64 // first seq still answered
		first2      uint64
		wantLastPos int64
	}{
		{"truncate everything", 0, -1, 0, 100, 1, 101, -1},
		{"truncate mid", 16 * 10, -1, 10, 110, 1, 101, 16*9 + 8},
		{"truncate between origins", 16*10 + 8, -1, 11, 110, 1, 101, 16 * 10},
		{"truncate nothing", 1 << 40, -1, 40, 140, 1, 101, 16*39 + 8},
		{"drop some", -1, 16 * 10, 40, 140, 9, 109, 16*39 + 8},
		{"drop all but last chunk", -1, 1 << 40, 40, 140, 37, 137, 16*39 + 8},
		{"drop then truncate all", 0, 16 * 10, 8, 108, 9, 109, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, dir := setup(t)
			if tc.drop >= 0 {
				if err := o.DropBefore(tc.drop); err != nil {
					t.Fatal(err)
				}
			}
			if tc.truncate >= 0 {
				if err := o.Truncate(tc.truncate); err != nil {
					t.Fatal(err)
				}
			}
			for _, reopen := range []bool{false, true} {
				if reopen {
					o.Close()
					o = openTestOrigins(t, dir, 4)
				}
				if o.Last(1) != tc.last1 || o.Last(2) != tc.last2 {
					t.Fatalf("last = %d, %d; want %d, %d", o.Last(1), o.Last(2), tc.last1, tc.last2)
				}
				if o.LastPos() != tc.wantLastPos {
					t.Fatalf("lastPos %d, want %d", o.LastPos(), tc.wantLastPos)
				}
				for _, c := range []struct{ origin, first, last, base uint64 }{
					{1, tc.first1, tc.last1, 1}, {2, tc.first2, tc.last2, 101},
				} {
					for seq := c.base; seq <= c.base+40; seq++ {
						pos, ok := o.Get(c.origin, seq)
						want := seq >= c.first && seq <= c.last
						if ok != want {
							t.Fatalf("get(%d, %d) ok=%v, want %v", c.origin, seq, ok, want)
						}
						if ok && pos != 16*int64(seq-c.base)+8*int64(c.origin-1) {
							t.Fatalf("get(%d, %d) = %d", c.origin, seq, pos)
						}
					}
				}
			}
			// Puts go on from the last seq, or anywhere the index has not held.
			if err := o.Put(1, tc.last1+1, 1<<41); err != nil {
				t.Fatal(err)
			}
			if err := o.Put(2, tc.last2, 1<<41+8); !errors.Is(err, errs.ErrDuplicate) {
				t.Fatalf("put of the last seq again: %v", err)
			}
			o.Close()
		})
	}
}

func TestOriginIndexIgnoresStrangers(t *testing.T) {
	dir := t.TempDir()
	o := openTestOrigins(t, dir, 4)
	o.Put(1, 1, 0)
	o.Close()
	for _, name := range []string{"0000000000000000", "00000000000000zz", "1", "000000000000000A"} {
		os.Mkdir(filepath.Join(dir, name), 0o700)
	}
	os.Mkdir(filepath.Join(dir, originDirName(9)), 0o700) // empty: removed
	o = openTestOrigins(t, dir, 4)
	defer o.Close()
	if v := o.Vector(); !maps.Equal(v, map[uint64]uint64{1: 1}) {
		t.Fatalf("vector %v", v)
	}
	if _, err := os.Stat(filepath.Join(dir, originDirName(9))); !os.IsNotExist(err) {
		t.Errorf("empty origin directory kept: %v", err)
	}
	// A new origin 9 can start anywhere.
	if err := o.Put(9, 77, 8); err != nil || o.Last(9) != 77 {
		t.Fatalf("put to origin 9: %v, last %d", err, o.Last(9))
	}
}

func TestOriginIndexConcurrent(t *testing.T) {
	o := openTestOrigins(t, t.TempDir(), 8)
	defer o.Close()
	const n = 600
	var done atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 3))
			for !done.Load() {
				origin := uint64(rng.IntN(3) + 1)
				last := o.Last(origin)
				if last == 0 {
					continue
				}
				seq := rng.Uint64N(last) + 1
				pos, ok := o.Get(origin, seq)
				if !ok || pos != int64(8*(3*(seq-1)+origin-1)) {
					errc <- fmt.Errorf("get(%d, %d) = %d %v with last %d", origin, seq, pos, ok, last)
					return
				}
				o.Vector()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			if err := o.Sync(); err != nil {
				errc <- err
				return
			}
		}
	}()
	for i := range uint64(n) {
		origin := i%3 + 1
		if err := o.Put(origin, i/3+1, int64(8*i)); err != nil {
			t.Fatal(err)
		}
	}
	done.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// TestIndexDiskFull: a chunk the file system refuses fails the append or
// put with ErrDiskFull and changes nothing.
func TestIndexDiskFull(t *testing.T) {
	if !testkit.InFSizeChild(t) {
		return
	}
	ti := openTestTopics(t, t.TempDir(), 1024) // a 12 KiB chunk, then 24 KiB ones
	defer ti.Close()
	testkit.SetFSizeLimit(t, 8<<10)
	_, err := ti.Append([]byte("new"), idxEntry(0))
	testkit.SetFSizeLimit(t, 0)
	if !errors.Is(err, errs.ErrDiskFull) {
		t.Fatalf("first append to a new topic: %v, want ErrDiskFull", err)
	}
	if ti.Get("new") != nil || len(ti.Names()) != 0 || ti.LastPos() != -1 {
		t.Fatal("a topic whose first append failed is visible")
	}
	const full = firstIndexChunkEntries + 2*1024 // the first three chunks
	for i := range full {
		if i == firstIndexChunkEntries {
			// The second and third chunks are made ahead; the fourth is
			// asked for at the second entry in the second: the limit is set
			// before, so that the preparer fails to make it too.
			preparedAhead(t, ti.Get("a").arr)
			testkit.SetFSizeLimit(t, 8<<10)
		}
		if _, err := ti.Append([]byte("a"), idxEntry(int64(8*i))); err != nil {
			t.Fatal(err)
		}
	}
	_, err = ti.Append([]byte("a"), idxEntry(8*full))
	testkit.SetFSizeLimit(t, 0)
	if !errors.Is(err, errs.ErrDiskFull) {
		t.Fatalf("append needing a new chunk: %v, want ErrDiskFull", err)
	}
	x := ti.Get("a")
	if x.Len() != full || ti.LastPos() != 8*(full-1) {
		t.Fatalf("len %d lastPos %d after a failed append", x.Len(), ti.LastPos())
	}
	if off, err := ti.Append([]byte("a"), idxEntry(8*full)); err != nil || off != full {
		t.Fatalf("append once space is back: %d, %v", off, err)
	}
	for off := range uint64(full + 1) {
		if e, err := x.Entry(off); err != nil || e != idxEntry(int64(8*off)) {
			t.Fatalf("entry %d: %+v %v", off, e, err)
		}
	}
	if off, err := ti.Append([]byte("new"), idxEntry(1<<20)); err != nil || off != 0 {
		t.Fatalf("new topic once space is back: %d, %v", off, err)
	}

	dir := t.TempDir()
	o := openTestOrigins(t, dir, 1024) // a 4 KiB chunk, then 8 KiB ones
	defer o.Close()
	testkit.SetFSizeLimit(t, 2<<10)
	err = o.Put(5, 10, 0)
	testkit.SetFSizeLimit(t, 0)
	if !errors.Is(err, errs.ErrDiskFull) {
		t.Fatalf("put to a new origin: %v, want ErrDiskFull", err)
	}
	if o.Last(5) != 0 || len(o.Vector()) != 0 {
		t.Fatal("an origin whose first put failed is visible")
	}
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Fatalf("%d entries left in the origin directory", len(des))
	}
	// Its first seq was not taken: another one may start it.
	if err := o.Put(5, 20, 0); err != nil || o.Last(5) != 20 {
		t.Fatalf("put once space is back: %v, last %d", err, o.Last(5))
	}
}

func BenchmarkTopicIndexAppend(b *testing.B) {
	for _, topics := range []int{1, 100} {
		b.Run(fmt.Sprintf("topics=%d", topics), func(b *testing.B) {
			ti, err := OpenTopics(b.TempDir(), 0, 4, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer ti.Close()
			names := make([][]byte, topics)
			for i := range names {
				names[i] = []byte(fmt.Sprintf("topic-%d", i))
				if _, err := ti.Append(names[i], Entry{Pos: int64(i)}); err != nil {
					b.Fatal(err)
				}
			}
			pos := int64(topics)
			b.SetBytes(topicEntrySize)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := ti.Append(names[i%topics], Entry{Pos: pos, Size: 100, TagHash: 7, HLC: uint64(pos)}); err != nil {
					b.Fatal(err)
				}
				pos++
			}
		})
	}
}

func BenchmarkOriginIndexPut(b *testing.B) {
	o, err := OpenOrigins(b.TempDir(), 0, 4, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	if err := o.Put(1, 1, 0); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(originEntrySize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := o.Put(1, uint64(i)+2, int64(i)+1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTopicIndexEntry(b *testing.B) {
	ti, err := OpenTopics(b.TempDir(), 0, 4, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ti.Close()
	const n = 1 << 16
	for i := range n {
		if _, err := ti.Append([]byte("t"), Entry{Pos: int64(i)}); err != nil {
			b.Fatal(err)
		}
	}
	x := ti.Get("t")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := x.Entry(uint64(i % n)); err != nil {
			b.Fatal(err)
		}
	}
}

// TestIndexAppendAll: runs of entries (shorter and longer than appendRun,
// across chunks of 4 entries) read back as the same entries appended one
// by one would, after a reopen too; a run that would be refused writes
// nothing.
func TestIndexAppendAll(t *testing.T) {
	dir, odir := t.TempDir(), t.TempDir()
	ti := openTestTopics(t, dir, 4)
	o := openTestOrigins(t, odir, 4)
	var want []Entry
	pos := int64(0)
	for _, n := range []int{1, 5, 16, 17, 40, 3} {
		var es []Entry
		var poss []int64
		for range n {
			es = append(es, idxEntry(pos))
			poss = append(poss, pos)
			pos += 8
		}
		off, err := ti.AppendAll([]byte("t"), es)
		if err != nil || off != uint64(len(want)) {
			t.Fatalf("run of %d: offset %d, %v; want %d", n, off, err, len(want))
		}
		if err := o.PutAll(7, uint64(len(want))+1, poss); err != nil {
			t.Fatalf("run of %d: %v", n, err)
		}
		want = append(want, es...)
	}
	last := want[len(want)-1].Pos
	for _, c := range []struct {
		name string
		es   []Entry
		err  error
	}{
		{"at the last position", []Entry{idxEntry(last), idxEntry(last + 8)}, errs.ErrDuplicate},
		{"not ascending", []Entry{idxEntry(last + 16), idxEntry(last + 8)}, record.ErrInvalid},
		{"none", nil, record.ErrInvalid},
	} {
		if _, err := ti.AppendAll([]byte("t"), c.es); !errors.Is(err, c.err) {
			t.Fatalf("topic run %s: %v, want %v", c.name, err, c.err)
		}
		var poss []int64
		for _, e := range c.es {
			poss = append(poss, e.Pos)
		}
		seq := uint64(len(want)) + 1
		if c.err == errs.ErrDuplicate {
			seq-- // a seq held already
		}
		if err := o.PutAll(7, seq, poss); !errors.Is(err, c.err) {
			t.Fatalf("origin run %s: %v, want %v", c.name, err, c.err)
		}
	}
	if err := o.PutAll(7, uint64(len(want))+2, []int64{last + 8}); !errors.Is(err, errs.ErrOutOfOrder) {
		t.Fatalf("origin run past the next seq: %v", err)
	}
	check := func(ti *Topics, o *Origins) {
		t.Helper()
		x := ti.Get("t")
		if x == nil || x.Len() != uint64(len(want)) {
			t.Fatalf("topic holds %v entries, want %d", x, len(want))
		}
		for i, e := range want {
			if got, err := x.Entry(uint64(i)); err != nil || got != e {
				t.Fatalf("entry %d = %+v, %v; want %+v", i, got, err, e)
			}
			if p, ok := o.Get(7, uint64(i)+1); !ok || p != e.Pos {
				t.Fatalf("origin seq %d at %d %v, want %d", i+1, p, ok, e.Pos)
			}
		}
		if v := o.Vector(); v[7] != uint64(len(want)) {
			t.Fatalf("vector %v, want 7: %d", v, len(want))
		}
	}
	check(ti, o)
	ti.Close()
	o.Close()
	ti, o = openTestTopics(t, dir, 4), openTestOrigins(t, odir, 4)
	defer ti.Close()
	defer o.Close()
	check(ti, o)
}
