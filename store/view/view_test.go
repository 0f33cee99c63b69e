package view

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

var viewSeed = flag.Uint64("view.seed", 0, "seed of the view property tests (0: from the clock)")

// propertySeed is the seed of a property test: -view.seed, or the clock's
// when that is 0; it is logged, so that a failure can be run again.
func propertySeed(t *testing.T) uint64 {
	seed := *viewSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -view.seed=%d)", seed, seed)
	return seed
}

// viewRec builds a checked record the way the log holds one: encoded into a
// buffer and decoded back.
type viewRec struct {
	topic, key, tag, value string
	del                    bool
	origin, seq, hlc       uint64
}

func (r viewRec) record(tb testing.TB) record.Record {
	tb.Helper()
	m := &record.Message{Topic: r.topic, Key: r.key, Tag: r.tag, Value: []byte(r.value), Delete: r.del}
	return stamped(tb, m, record.Stamp{Origin: r.origin, Seq: r.seq, HLC: r.hlc})
}

// stamped is the record of m, which must be valid, stamped st: encoded
// into a buffer and decoded back, as the log holds it.
func stamped(tb testing.TB, m *record.Message, st record.Stamp) record.Record {
	tb.Helper()
	if err := m.Validate(); err != nil {
		tb.Fatalf("%+v: %v", m, err)
	}
	buf := make([]byte, record.Padded(m.EncodedSize()))
	record.Encode(buf, m, st)
	rec, err := record.Decode(buf)
	if err != nil {
		tb.Fatalf("record.Decode(%+v): %v", m, err)
	}
	return rec
}

func viewPut(topic, key, value string, origin, seq, hlc uint64) viewRec {
	return viewRec{topic: topic, key: key, value: value, origin: origin, seq: seq, hlc: hlc}
}

func viewDel(topic, key string, origin, seq, hlc uint64) viewRec {
	return viewRec{topic: topic, key: key, del: true, origin: origin, seq: seq, hlc: hlc}
}

func TestViewApplyWinRule(t *testing.T) {
	type step struct {
		rec     viewRec
		changed bool
	}
	tests := []struct {
		name      string
		steps     []step
		wantValue string // "" with wantFound false: absent
		wantFound bool
		wantStamp record.Stamp
		wantLen   int
	}{
		{
			name:      "higher hlc wins, in order",
			steps:     []step{{viewPut("t", "k", "old", 1, 1, 10), true}, {viewPut("t", "k", "new", 1, 2, 20), true}},
			wantValue: "new", wantFound: true, wantStamp: record.Stamp{Origin: 1, Seq: 2, HLC: 20}, wantLen: 1,
		},
		{
			name:      "higher hlc wins, out of order",
			steps:     []step{{viewPut("t", "k", "new", 1, 2, 20), true}, {viewPut("t", "k", "old", 1, 1, 10), false}},
			wantValue: "new", wantFound: true, wantStamp: record.Stamp{Origin: 1, Seq: 2, HLC: 20}, wantLen: 1,
		},
		{
			name:      "higher hlc wins over higher origin",
			steps:     []step{{viewPut("t", "k", "a", 9, 1, 10), true}, {viewPut("t", "k", "b", 1, 1, 11), true}},
			wantValue: "b", wantFound: true, wantStamp: record.Stamp{Origin: 1, Seq: 1, HLC: 11}, wantLen: 1,
		},
		{
			name:      "equal hlc: higher origin wins",
			steps:     []step{{viewPut("t", "k", "low", 1, 1, 10), true}, {viewPut("t", "k", "high", 2, 1, 10), true}},
			wantValue: "high", wantFound: true, wantStamp: record.Stamp{Origin: 2, Seq: 1, HLC: 10}, wantLen: 1,
		},
		{
			name:      "equal hlc: higher origin wins, out of order",
			steps:     []step{{viewPut("t", "k", "high", 2, 1, 10), true}, {viewPut("t", "k", "low", 1, 1, 10), false}},
			wantValue: "high", wantFound: true, wantStamp: record.Stamp{Origin: 2, Seq: 1, HLC: 10}, wantLen: 1,
		},
		{
			name:      "equal hlc and origin is the same message: no change",
			steps:     []step{{viewPut("t", "k", "v", 1, 1, 10), true}, {viewPut("t", "k", "v", 1, 1, 10), false}},
			wantValue: "v", wantFound: true, wantStamp: record.Stamp{Origin: 1, Seq: 1, HLC: 10}, wantLen: 1,
		},
		{
			name:    "newer tombstone deletes",
			steps:   []step{{viewPut("t", "k", "v", 1, 1, 10), true}, {viewDel("t", "k", 1, 2, 20), true}},
			wantLen: 0,
		},
		{
			name:    "tombstone then older put stays deleted",
			steps:   []step{{viewDel("t", "k", 1, 2, 20), true}, {viewPut("t", "k", "v", 2, 5, 15), false}},
			wantLen: 0,
		},
		{
			name:    "tombstone then older put with equal hlc and lower origin stays deleted",
			steps:   []step{{viewDel("t", "k", 3, 2, 20), true}, {viewPut("t", "k", "v", 2, 5, 20), false}},
			wantLen: 0,
		},
		{
			name:      "tombstone then newer put brings the key back",
			steps:     []step{{viewDel("t", "k", 1, 1, 20), true}, {viewPut("t", "k", "back", 1, 2, 30), true}},
			wantValue: "back", wantFound: true, wantStamp: record.Stamp{Origin: 1, Seq: 2, HLC: 30}, wantLen: 1,
		},
		{
			name:    "tombstone for an unknown key is kept",
			steps:   []step{{viewDel("t", "k", 1, 1, 20), true}},
			wantLen: 0,
		},
		{
			name:    "keyless records are ignored",
			steps:   []step{{viewPut("t", "", "stream", 1, 1, 10), false}},
			wantLen: 0,
		},
		{
			name:      "topics are separate",
			steps:     []step{{viewPut("t", "k", "mine", 1, 1, 10), true}, {viewPut("u", "k", "other", 1, 2, 99), true}},
			wantValue: "mine", wantFound: true, wantStamp: record.Stamp{Origin: 1, Seq: 1, HLC: 10}, wantLen: 2,
		},
		{
			name:      "empty value is a live value",
			steps:     []step{{viewPut("t", "k", "", 1, 1, 10), true}},
			wantValue: "", wantFound: true, wantStamp: record.Stamp{Origin: 1, Seq: 1, HLC: 10}, wantLen: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := New()
			for i, s := range tt.steps {
				if got := v.Apply(s.rec.record(t)); got != s.changed {
					t.Fatalf("step %d: Apply(%+v) = %v, want %v", i, s.rec, got, s.changed)
				}
			}
			e, ok := v.Get("t", "k")
			if ok != tt.wantFound {
				t.Fatalf("Get found = %v, want %v (entry %+v)", ok, tt.wantFound, e)
			}
			if ok {
				if string(e.Value) != tt.wantValue || e.Stamp != tt.wantStamp {
					t.Fatalf("Get = (%q, %+v), want (%q, %+v)", e.Value, e.Stamp, tt.wantValue, tt.wantStamp)
				}
			}
			if got := v.Len(); got != tt.wantLen {
				t.Fatalf("Len = %d, want %d", got, tt.wantLen)
			}
			live := 0
			for _, ti := range v.Topics() {
				live += ti.Keys
				if ti.Messages != 0 {
					t.Fatalf("topic %q: Messages = %d, the view leaves it 0", ti.Name, ti.Messages)
				}
				if n := len(v.Keys(ti.Name, "", "", 0)); n != ti.Keys {
					t.Fatalf("topic %q: %d keys listed, Topics says %d", ti.Name, n, ti.Keys)
				}
			}
			if live != tt.wantLen {
				t.Fatalf("Topics count %d live keys, Len says %d", live, tt.wantLen)
			}
			if !ok && slices.Contains(v.Keys("t", "", "", 0), "k") {
				t.Fatal("a deleted key is listed by Keys")
			}
		})
	}
}

func TestViewGetEntry(t *testing.T) {
	v := New()
	r := viewRec{topic: "prices", key: "sku-1", tag: "eu", value: "9.99", origin: 4, seq: 7, hlc: 1234}
	v.Apply(r.record(t))
	e, ok := v.Get("prices", "sku-1")
	if !ok {
		t.Fatal("Get: not found")
	}
	want := Entry{Value: []byte("9.99"), Tag: "eu", Stamp: record.Stamp{Origin: 4, Seq: 7, HLC: 1234}}
	if !bytes.Equal(e.Value, want.Value) || e.Tag != want.Tag || e.Stamp != want.Stamp {
		t.Fatalf("Get = %+v, want %+v", e, want)
	}
	if cap(e.Value) != len(e.Value) {
		// Appending to the value must reallocate, never write into the view.
		t.Fatalf("value cap %d > len %d", cap(e.Value), len(e.Value))
	}
	for _, tc := range []struct{ topic, key string }{{"prices", "sku-2"}, {"other", "sku-1"}, {"", ""}} {
		if _, ok := v.Get(tc.topic, tc.key); ok {
			t.Fatalf("Get(%q, %q) found an entry", tc.topic, tc.key)
		}
	}
}

func TestViewApplyCopiesBytes(t *testing.T) {
	v := New()
	rec := viewRec{topic: "t", key: "k", tag: "g", value: "value"}.withStamp(1, 1, 1).record(t)
	v.Apply(rec)
	for i := range rec {
		rec[i] = 0xff // the log's page is reused
	}
	e, ok := v.Get("t", "k")
	if !ok || string(e.Value) != "value" || e.Tag != "g" {
		t.Fatalf("after the record's bytes changed Get = %+v, %v", e, ok)
	}
	if keys := v.Keys("t", "", "", 0); !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("Keys = %q", keys)
	}
}

func (r viewRec) withStamp(origin, seq, hlc uint64) viewRec {
	r.origin, r.seq, r.hlc = origin, seq, hlc
	return r
}

func TestViewKeys(t *testing.T) {
	v := New()
	hlc := uint64(0)
	for _, k := range []string{"b", "a", "apple", "apricot", "banana", "c", "cherry", "ap", "a\xff", "d"} {
		hlc++
		v.Apply(viewPut("t", k, "v", 1, hlc, hlc).record(t))
	}
	hlc++
	v.Apply(viewDel("t", "apricot", 1, hlc, hlc).record(t))
	hlc++
	v.Apply(viewDel("t", "zzz", 1, hlc, hlc).record(t)) // a tombstone at the end
	hlc++
	v.Apply(viewPut("u", "apple", "v", 1, hlc, hlc).record(t))

	tests := []struct {
		name                 string
		topic, prefix, after string
		limit                int
		want                 []string
	}{
		{"all", "t", "", "", 0, []string{"a", "ap", "apple", "a\xff", "b", "banana", "c", "cherry", "d"}},
		{"limit", "t", "", "", 3, []string{"a", "ap", "apple"}},
		{"negative limit is no limit", "t", "", "", -1, []string{"a", "ap", "apple", "a\xff", "b", "banana", "c", "cherry", "d"}},
		{"prefix skips tombstones", "t", "ap", "", 0, []string{"ap", "apple"}},
		{"prefix and after", "t", "a", "ap", 0, []string{"apple", "a\xff"}},
		{"after inside", "t", "", "banana", 2, []string{"c", "cherry"}},
		{"after not a key", "t", "", "bb", 0, []string{"c", "cherry", "d"}},
		{"after past prefix", "t", "a", "b", 0, nil},
		{"after before prefix", "t", "c", "a", 0, []string{"c", "cherry"}},
		{"no match", "t", "x", "", 0, nil},
		{"after the last", "t", "", "d", 0, nil},
		{"unknown topic", "nope", "", "", 0, nil},
		{"other topic", "u", "", "", 0, []string{"apple"}},
		{"prefix longer than any key", "t", string(make([]byte, record.MaxKeyBytes+1)), "", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := v.Keys(tt.topic, tt.prefix, tt.after, tt.limit)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Keys(%q, %q, %q, %d) = %q, want %q", tt.topic, tt.prefix, tt.after, tt.limit, got, tt.want)
			}
		})
	}

	// Paging with after= visits every live key once.
	var paged []string
	after := ""
	for {
		page := v.Keys("t", "", after, 2)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1]
	}
	if want := v.Keys("t", "", "", 0); !slices.Equal(paged, want) {
		t.Fatalf("paged = %q, want %q", paged, want)
	}
}

func TestViewTopics(t *testing.T) {
	v := New()
	if got := v.Topics(); len(got) != 0 {
		t.Fatalf("empty view Topics = %+v", got)
	}
	v.Apply(viewPut("b", "k1", "v", 1, 1, 1).record(t))
	v.Apply(viewPut("b", "k2", "v", 1, 2, 2).record(t))
	v.Apply(viewPut("a", "k1", "v", 1, 3, 3).record(t))
	v.Apply(viewDel("a", "k1", 1, 4, 4).record(t))
	v.Apply(viewPut("c", "", "stream only", 1, 5, 5).record(t))
	want := []TopicInfo{{Name: "a", Keys: 0}, {Name: "b", Keys: 2}}
	if got := v.Topics(); !slices.Equal(got, want) {
		t.Fatalf("Topics = %+v, want %+v", got, want)
	}
	if v.Len() != 2 {
		t.Fatalf("Len = %d, want 2", v.Len())
	}
}

// TestViewReplacedValueIsFreed checks that the view keeps nothing of a
// value it replaced: neither the map key nor the B-tree may pin the old
// item's bytes.
func TestViewReplacedValueIsFreed(t *testing.T) {
	v := New()
	big := string(bytes.Repeat([]byte("x"), 4096))
	v.Apply(viewPut("t", "key", big, 1, 1, 1).record(t))
	freed := make(chan struct{})
	old := v.topics["t"].byKey.get("key")
	runtime.AddCleanup((*byte)(old.body), func(ch chan struct{}) { close(ch) }, freed)
	old = nil

	v.Apply(viewPut("t", "key", "small", 1, 2, 2).record(t))
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		select {
		case <-freed:
			if e, ok := v.Get("t", "key"); !ok || string(e.Value) != "small" {
				t.Fatalf("Get = %+v, %v", e, ok)
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the replaced value is still reachable from the view")
		}
	}
}

func TestViewDigest(t *testing.T) {
	empty := sha256.Sum256(nil)
	if d := New().Digest(); d != empty {
		t.Fatalf("empty view digest %x, want sha256 of nothing %x", d, empty)
	}
	build := func(recs ...viewRec) [32]byte {
		v := New()
		for _, r := range recs {
			v.Apply(r.record(t))
		}
		return v.Digest()
	}
	a := build(viewPut("t", "k", "v", 1, 1, 1), viewPut("t", "j", "w", 2, 1, 1))
	if b := build(viewPut("t", "j", "w", 2, 1, 1), viewPut("t", "k", "v", 1, 1, 1)); a != b {
		t.Fatal("same entries applied in another order give another digest")
	}
	differ := map[string][32]byte{
		"value":   build(viewPut("t", "k", "V", 1, 1, 1), viewPut("t", "j", "w", 2, 1, 1)),
		"stamp":   build(viewPut("t", "k", "v", 1, 2, 1), viewPut("t", "j", "w", 2, 1, 1)),
		"topic":   build(viewPut("u", "k", "v", 1, 1, 1), viewPut("t", "j", "w", 2, 1, 1)),
		"deleted": build(viewPut("t", "k", "v", 1, 1, 1), viewPut("t", "j", "w", 2, 1, 1), viewDel("t", "k", 1, 2, 2)),
		// Field boundaries are length-prefixed: moving a byte from the
		// key to the value must change the digest.
		"boundary": build(viewPut("t", "kv", "", 1, 1, 1), viewPut("t", "j", "w", 2, 1, 1)),
	}
	for name, d := range differ {
		if d == a {
			t.Errorf("changing the %s left the digest unchanged", name)
		}
	}
	// A put superseded by a tombstone leaves only the tombstone: the same
	// entries as the tombstone alone.
	if build(viewPut("t", "k", "v", 1, 1, 1), viewDel("t", "k", 1, 2, 2)) != build(viewDel("t", "k", 1, 2, 2)) {
		t.Error("a put superseded by a tombstone left a trace in the digest")
	}
	// A tombstone is left out (nodes collect them at their own moments):
	// a view with one hashes as the view without it.
	if build(viewPut("t", "k", "v", 1, 1, 1), viewDel("t", "z", 1, 2, 2)) != build(viewPut("t", "k", "v", 1, 1, 1)) {
		t.Error("a tombstone changed the digest")
	}
}

// viewRandomRecords makes n records over a few origins that collide on
// keys and on HLCs: each origin's HLCs increase (as a real origin's do), but
// the origins share a small range, so equal HLCs from different origins are
// common. Some are tombstones, some keyless.
func viewRandomRecords(rng *rand.Rand, n int) []viewRec {
	origins := []uint64{0x11, 0x22, 0x33, 0xfeed}
	seqs := map[uint64]uint64{}
	hlcs := map[uint64]uint64{}
	recs := make([]viewRec, 0, n)
	for range n {
		o := origins[rng.IntN(len(origins))]
		seqs[o]++
		hlcs[o] += uint64(rng.IntN(3) + 1)
		r := viewRec{
			topic:  []string{"prices", "stock"}[rng.IntN(2)],
			key:    fmt.Sprintf("k%02d", rng.IntN(12)),
			tag:    []string{"", "eu", "us"}[rng.IntN(3)],
			value:  fmt.Sprintf("v%d", rng.IntN(1000)),
			origin: o, seq: seqs[o], hlc: 1000 + hlcs[o],
		}
		switch p := rng.IntN(10); {
		case p < 2:
			r.del, r.tag, r.value = true, "", ""
		case p == 2:
			r.key = ""
		}
		recs = append(recs, r)
	}
	return recs
}

// viewModel is what the win rule says the view must hold: per (topic, key)
// the record with the greatest (HLC, origin).
func viewModel(recs []viewRec) map[[2]string]viewRec {
	m := map[[2]string]viewRec{}
	for _, r := range recs {
		if r.key == "" {
			continue
		}
		k := [2]string{r.topic, r.key}
		if cur, ok := m[k]; !ok || r.hlc > cur.hlc || (r.hlc == cur.hlc && r.origin > cur.origin) {
			m[k] = r
		}
	}
	return m
}

func TestViewConvergesInAnyOrder(t *testing.T) {
	seed := propertySeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))

	for round := range 5 {
		recs := viewRandomRecords(rng, 50+rng.IntN(300))
		encoded := make([]record.Record, len(recs))
		for i, r := range recs {
			encoded[i] = r.record(t)
		}
		model := viewModel(recs)

		var ref [32]byte
		for order := range 40 {
			rng.Shuffle(len(encoded), func(i, j int) { encoded[i], encoded[j] = encoded[j], encoded[i] })
			v := New()
			for _, r := range encoded {
				v.Apply(r)
			}
			// Applying everything again changes nothing.
			for _, r := range encoded {
				if v.Apply(r) {
					t.Fatalf("seed %d round %d: re-applying %v changed the view", seed, round, r.Stamp())
				}
			}
			d := v.Digest()
			if order == 0 {
				ref = d
			} else if d != ref {
				t.Fatalf("seed %d round %d order %d: digest %x, first order gave %x", seed, round, order, d, ref)
			}

			live := 0
			for k, want := range model {
				e, ok := v.Get(k[0], k[1])
				if want.del {
					if ok {
						t.Fatalf("seed %d round %d: %q/%q deleted by %d/%d but Get = %+v", seed, round, k[0], k[1], want.origin, want.seq, e)
					}
					continue
				}
				live++
				wantStamp := record.Stamp{Origin: want.origin, Seq: want.seq, HLC: want.hlc}
				if !ok || string(e.Value) != want.value || e.Tag != want.tag || e.Stamp != wantStamp {
					t.Fatalf("seed %d round %d: Get(%q, %q) = %+v, %v; want %q tag %q %+v", seed, round, k[0], k[1], e, ok, want.value, want.tag, wantStamp)
				}
			}
			if v.Len() != live {
				t.Fatalf("seed %d round %d: Len = %d, model has %d live keys", seed, round, v.Len(), live)
			}
		}
	}
}

func TestViewConcurrentReadersAndWriter(t *testing.T) {
	v := New()
	const keys = 200
	recs := make([]record.Record, 0, 2000)
	for i := range cap(recs) {
		r := viewPut("t", fmt.Sprintf("k%03d", i%keys), fmt.Sprint(i), 1, uint64(i+1), uint64(i+1))
		if i%7 == 0 {
			r = viewDel("t", r.key, 1, uint64(i+1), uint64(i+1))
		}
		recs = append(recs, r.record(t))
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				switch g {
				case 0:
					if e, ok := v.Get("t", fmt.Sprintf("k%03d", i%keys)); ok && len(e.Value) == 0 {
						t.Error("a live value read empty")
					}
				case 1:
					keys := v.Keys("t", "k0", "", 50)
					if !slices.IsSorted(keys) {
						t.Errorf("Keys not sorted: %q", keys)
					}
				case 2:
					v.Digest()
					v.Topics()
					v.Len()
				}
			}
		}()
	}
	for _, r := range recs {
		v.Apply(r)
	}
	close(done)
	wg.Wait()
	// The last record of each key wins: keys whose last write was a
	// tombstone are gone.
	want := 0
	for k := range keys {
		last := cap(recs) - keys + k
		if last%7 != 0 {
			want++
		}
	}
	if v.Len() != want {
		t.Fatalf("Len = %d, want %d", v.Len(), want)
	}
}

// viewBench is the 10-million-key view BenchmarkViewGet reads, built once.
var viewBench struct {
	once      sync.Once
	v         *View
	keys      []string // the keys to look up, in a random order
	heapBytes float64  // heap per key after building
	build     time.Duration
}

const viewBenchKeys = 10_000_000

func viewBenchKey(i int) string { return fmt.Sprintf("sku-%010d", i) }

func BenchmarkViewGet(b *testing.B) {
	viewBench.once.Do(func() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		v := New()
		buf := make([]byte, 256)
		value := []byte("19.99 EUR/unit  ") // 16 bytes
		for i := range viewBenchKeys {
			m := &record.Message{Topic: "prices", Key: viewBenchKey(i), Value: value}
			n := record.Encode(buf, m, record.Stamp{Origin: 1, Seq: uint64(i + 1), HLC: uint64(i + 1)})
			v.Apply(record.Record(buf[:n]))
		}
		viewBench.build = time.Since(start)
		runtime.GC()
		runtime.ReadMemStats(&after)
		viewBench.heapBytes = float64(after.HeapAlloc-before.HeapAlloc) / viewBenchKeys
		viewBench.v = v
		rng := rand.New(rand.NewPCG(1, 2))
		viewBench.keys = make([]string, 1<<20)
		for i := range viewBench.keys {
			viewBench.keys[i] = viewBenchKey(rng.IntN(viewBenchKeys))
		}
	})
	v, keys := viewBench.v, viewBench.keys
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, ok := v.Get("prices", keys[i&(len(keys)-1)]); !ok {
			b.Fatal("key not found")
		}
	}
	b.ReportMetric(viewBench.heapBytes, "heap-B/key")
	b.ReportMetric(viewBench.build.Seconds(), "build-s")
}

func BenchmarkViewApply(b *testing.B) {
	for _, keys := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			v := New()
			recs := make([]record.Record, keys)
			for i := range recs {
				m := &record.Message{Topic: "prices", Key: viewBenchKey(i), Value: []byte("19.99 EUR/unit  ")}
				buf := make([]byte, m.EncodedSize())
				record.Encode(buf, m, record.Stamp{Origin: 1, Seq: 1, HLC: 1})
				recs[i] = buf
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				r := recs[i%keys]
				// A newer stamp each time, so every Apply replaces an
				// entry (the view does not look at the CRC).
				hlc := uint64(i + 2)
				binary.LittleEndian.PutUint64(r[32:], hlc)
				if !v.Apply(r) {
					b.Fatal("apply did not change the view")
				}
			}
		})
	}
}

// BenchmarkViewDigests is what GET /v1/status and every verify round pay:
// the per-topic digest of a whole view of 100,000 keys.
func BenchmarkViewDigests(b *testing.B) {
	v := New()
	buf := make([]byte, 256)
	value := []byte("19.99 EUR/unit  ")
	for i := range 100_000 {
		m := &record.Message{Topic: "prices", Key: viewBenchKey(i), Value: value}
		n := record.Encode(buf, m, record.Stamp{Origin: 1, Seq: uint64(i + 1), HLC: uint64(i + 1)})
		v.Apply(record.Record(buf[:n]))
	}
	b.ReportAllocs()
	for b.Loop() {
		v.Freeze().Digests()
	}
}

// TestViewItemSize: the epoch of in-place updates lives in what was the
// item's padding; an item without times of its own is one 48-byte
// allocation class, with them (wideItem) one of 64, and a key's
// timedEntry one of 80.
func TestViewItemSize(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want uintptr
	}{
		{"viewItem", unsafe.Sizeof(viewItem{}), 48},
		{"wideItem", unsafe.Sizeof(wideItem{}), 64},
		{"timedEntry", unsafe.Sizeof(timedEntry{}), 80},
	} {
		if tc.got != tc.want {
			t.Errorf("a %s is %d bytes, want %d", tc.name, tc.got, tc.want)
		}
	}
}

// TestViewFrozenCloneSeesNoLaterUpdate: a key updated again and again is
// updated in place, yet a clone frozen in between (FollowFrom's view)
// still yields the value of its instant, while the view moves on.
func TestViewFrozenCloneSeesNoLaterUpdate(t *testing.T) {
	v := New()
	hlc := uint64(0)
	put := func(key, value string) {
		hlc++
		if !v.Apply(viewPut("t", key, value, 1, hlc, hlc).record(t)) {
			t.Fatalf("put %s=%s did not change the view", key, value)
		}
	}
	for i := range 3 {
		put("a", fmt.Sprint("a", i)) // in place from the second on
		put("b", fmt.Sprint("b", i))
	}
	frozen := v.FollowFrom(nil, nil)
	for i := 3; i < 10; i++ {
		put("a", fmt.Sprint("a", i)) // a new item, then in place
		put("c", fmt.Sprint("c", i))
	}
	got := map[string]string{}
	for c := range frozen {
		got[c.Key] = string(c.Value)
	}
	if want := map[string]string{"a": "a2", "b": "b2"}; !maps.Equal(got, want) {
		t.Fatalf("the frozen view holds %v, want %v", got, want)
	}
	for k, want := range map[string]string{"a": "a9", "b": "b2", "c": "c9"} {
		if e, ok := v.Get("t", k); !ok || string(e.Value) != want {
			t.Fatalf("Get(%s) = %q %v, want %q", k, e.Value, ok, want)
		}
	}
	if v.Len() != 3 || v.topics["t"].order.Len() != 3 {
		t.Fatalf("Len %d, B-tree %d, want 3 and 3", v.Len(), v.topics["t"].order.Len())
	}
}

// TestViewEpochWraps: when the freeze count wraps, every item counts as
// made before the last freeze, so none a clone holds is updated in place.
func TestViewEpochWraps(t *testing.T) {
	v := New()
	v.Apply(viewPut("t", "k", "v1", 1, 1, 1).record(t))
	v.epoch = 1<<16 - 1
	v.topics["t"].byKey.get("k").epoch = 1<<16 - 1
	frozen := v.FollowFrom(nil, nil) // epoch wraps to 1
	v.Apply(viewPut("t", "k", "v2", 1, 2, 2).record(t))
	for c := range frozen {
		if string(c.Value) != "v1" {
			t.Fatalf("the clone frozen at the wrap holds %q, want v1", c.Value)
		}
	}
}

// TestViewMergeKeepsOtherIntact: the view that merged another's entries
// updates its own copies in place, never the other view's items.
func TestViewMergeKeepsOtherIntact(t *testing.T) {
	other := New()
	other.Apply(viewPut("t", "k", "v1", 2, 1, 1).record(t))
	v := New()
	v.Merge(other)
	v.Apply(viewPut("t", "k", "v2", 1, 1, 2).record(t))
	v.Apply(viewPut("t", "k", "v3", 1, 2, 3).record(t))
	if e, ok := other.Get("t", "k"); !ok || string(e.Value) != "v1" {
		t.Fatalf("the merged-from view reads %q %v, want v1", e.Value, ok)
	}
	if e, ok := v.Get("t", "k"); !ok || string(e.Value) != "v3" {
		t.Fatalf("the merging view reads %q %v, want v3", e.Value, ok)
	}
}

// TestViewApplyBatchIsApply checks that ApplyBatch, which touches a
// batch's keys level by level before it applies them (touchLocked), ends
// where Apply of each record ends: the same entries, the same count of
// changes. The batches are of 1 to 40 records (past a touch step of 16),
// over enough keys for the key index to split into several tables, with
// repeats of a key in one batch, tombstones and keyless records.
func TestViewApplyBatchIsApply(t *testing.T) {
	seed := propertySeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0xba7c))
	recs := viewRandomRecords(rng, 20000)
	for i := range recs {
		if recs[i].key != "" && rng.IntN(4) != 0 {
			recs[i].key = fmt.Sprintf("k%04d", rng.IntN(3000)) // most over many keys, some over the 12 of viewRandomRecords
		}
	}
	batched, single := New(), New()
	for len(recs) > 0 {
		n := min(1+rng.IntN(40), len(recs))
		batch := make([]record.Record, n)
		want := 0
		for i, r := range recs[:n] {
			batch[i] = r.record(t)
			if single.Apply(batch[i]) {
				want++
			}
		}
		recs = recs[n:]
		if got := batched.ApplyBatch(batch); got != want {
			t.Fatalf("seed %d: ApplyBatch of %d records changed %d, Apply of each %d", seed, n, got, want)
		}
		if rng.IntN(20) == 0 || len(recs) == 0 {
			for _, v := range []*View{batched, single} {
				if err := indexAgrees(v); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
		}
	}
	if batched.Len() < 1000 {
		t.Fatalf("seed %d: %d live keys, want the index over several tables", seed, batched.Len())
	}
	if b, s := batched.Digest(), single.Digest(); b != s || batched.Len() != single.Len() {
		t.Fatalf("seed %d: ApplyBatch's view has %d keys, digest %x; Apply's %d, %x", seed, batched.Len(), b, single.Len(), s)
	}
}

// TestApplyBatchAllocatesBodies: a batch of updates in place (ordinary
// writes over keys the view holds) allocates each record's body and
// nothing else: ApplyBatch's scratch items are reused, not a new slice a
// batch (a third of a pipelined SET's garbage, which sets how often the
// collector runs). Both sizes of batch: within the touch step and past it;
// and Apply of one record, which copies it into the same scratch (its
// item as a value escaped: 64 bytes of garbage a record, and holes in
// the spans the B-tree's nodes live in).
// Under the race detector sync.Pool drops a Put in four at random, and the
// next batch makes its scratch again (2 allocations): there the mean over
// 400 batches must stay under one more than the bodies, which a new
// scratch a batch reaches (a quarter dropped is 0.5 more).
func TestApplyBatchAllocatesBodies(t *testing.T) {
	runs, slack := 50, 0.0
	if testkit.Race {
		runs, slack = 400, 0.999
	}
	batch := func(v *View, rs []record.Record) int { return v.ApplyBatch(rs) }
	one := func(v *View, rs []record.Record) int {
		if v.Apply(rs[0]) {
			return 1
		}
		return 0
	}
	for _, c := range []struct {
		name  string
		n     int
		apply func(*View, []record.Record) int
	}{{"16", 16, batch}, {"40", 40, batch}, {"Apply", 1, one}} {
		n := c.n
		t.Run(c.name, func(t *testing.T) {
			v := New()
			batches := make([][]record.Record, runs+2) // AllocsPerRun runs once more to warm up
			for b := range batches {
				batches[b] = make([]record.Record, n)
				for i := range n {
					batches[b][i] = viewRec{topic: "prices", key: fmt.Sprintf("sku-%03d", i), value: fmt.Sprintf("%8d", b),
						origin: 1, seq: uint64(b*n + i + 1), hlc: uint64(b*n + i + 1)}.record(t)
				}
			}
			c.apply(v, batches[0]) // the keys, new
			b := 1
			allocs := testing.AllocsPerRun(runs, func() {
				if got := c.apply(v, batches[b]); got != n {
					t.Fatalf("batch %d changed %d, want %d", b, got, n)
				}
				b++
			})
			if allocs < float64(n) || allocs > float64(n)+slack {
				t.Fatalf("a batch of %d updates allocated %v times, want %d (the bodies; %v more under -race)", n, allocs, n, slack)
			}
		})
	}
}
