package localview

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func newWriter(t testing.TB, path string) *Writer {
	t.Helper()
	w, err := Create(path, WriterOptions{GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func openReader(t testing.TB, path string) *Reader {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestPutGetDelete(t *testing.T) {
	path := filepath.Join(t.TempDir(), "view")
	w := newWriter(t, path)
	r := openReader(t, path)
	if _, _, _, err := r.Get("prices", "a"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("get before ready: %v", err)
	}
	w.SetReady(true)
	st := Stamp{HLC: 10, Origin: 7, Seq: 1}
	cases := []struct {
		topic, key, tag, value string
	}{
		{"prices", "a", "", "1.00"},
		{"prices", "b", "eu", "2.00"},
		{"prices", "", "", ""}, // an empty key and value are still an entry
		{"fx", "a", "t", "a value of some length, longer than a word or two"},
		{"p", "ricesa", "", "same bytes as prices/a, another (topic, key)"},
	}
	for _, c := range cases {
		if err := w.Put(c.topic, c.key, c.tag, []byte(c.value), st); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		v, tag, got, err := r.Get(c.topic, c.key)
		if err != nil || string(v) != c.value || tag != c.tag || got != st {
			t.Errorf("get %s/%s: %q %q %+v %v", c.topic, c.key, v, tag, got, err)
		}
	}
	if _, _, _, err := r.Get("prices", "missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing key: %v", err)
	}
	// In place (shorter), then larger than the record's room.
	if err := w.Put("prices", "a", "", []byte("9"), Stamp{HLC: 11}); err != nil {
		t.Fatal(err)
	}
	if v, _, _, _ := r.Get("prices", "a"); string(v) != "9" {
		t.Errorf("after a shorter put: %q", v)
	}
	long := []byte("a much longer value than the record had room for")
	if err := w.Put("prices", "a", "x", long, Stamp{HLC: 12}); err != nil {
		t.Fatal(err)
	}
	if v, tag, st, _ := r.Get("prices", "a"); string(v) != string(long) || tag != "x" || st.HLC != 12 {
		t.Errorf("after a longer put: %q %q %+v", v, tag, st)
	}
	if err := w.Delete("prices", "b", Stamp{HLC: 13}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := r.Get("prices", "b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted key: %v", err)
	}
	keys, err := r.Keys("prices")
	if err != nil || !slices.Equal(keys, []string{"", "a"}) {
		t.Errorf("keys: %q %v", keys, err)
	}
	if err := w.Put("prices", "b", "", []byte("back"), Stamp{HLC: 14}); err != nil {
		t.Fatal(err)
	}
	if v, _, _, _ := r.Get("prices", "b"); string(v) != "back" {
		t.Errorf("re-inserted: %q", v)
	}
	if w.Len() != 5 {
		t.Errorf("len %d", w.Len())
	}
}

// A file not ready whose header counts no alive member of those known
// says the node left its cluster: reads and Fresh fail with ErrAway (and
// ErrNotReady); not ready with members alive is loading, not away.
func TestAway(t *testing.T) {
	for _, tc := range []struct {
		name           string
		ready          bool
		alive, members int
		away           bool
	}{
		{"away", false, 0, 3, true},
		{"loading", false, 1, 3, false},
		{"lone node loading", false, 0, 0, false},
		{"ready", true, 3, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "view")
			w := newWriter(t, path)
			if err := w.Put("prices", "a", "", []byte("1"), Stamp{HLC: 1, Origin: 1, Seq: 1}); err != nil {
				t.Fatal(err)
			}
			w.SetCluster(tc.alive, tc.members)
			w.SetReady(tc.ready)
			w.Heartbeat(time.Now())
			r := openReader(t, path)
			_, _, _, getErr := r.Get("prices", "a")
			for name, err := range map[string]error{"Get": getErr, "Fresh": r.Fresh(time.Minute)} {
				if errors.Is(err, ErrAway) != tc.away || errors.Is(err, ErrNotReady) == tc.ready {
					t.Errorf("%s: %v", name, err)
				}
			}
			if st, err := r.Status(); err != nil || st.Away != tc.away || st.Ready != tc.ready {
				t.Errorf("status %+v, %v", st, err)
			}
		})
	}
}

func TestGrowCompactFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "view")
	w := newWriter(t, path)
	w.SetReady(true)
	r := openReader(t, path)
	gen0 := r.Generation()
	const n = 50_000
	for i := range n {
		if err := w.Put("t", fmt.Sprintf("key-%07d", i), "", fmt.Appendf(nil, "v%d", i), Stamp{HLC: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{0, 1, n / 2, n - 1} {
		v, _, _, err := r.Get("t", fmt.Sprintf("key-%07d", i))
		if err != nil || string(v) != fmt.Sprint("v", i) {
			t.Fatalf("key %d: %q %v", i, v, err)
		}
	}
	if r.Generation() == gen0 {
		t.Fatalf("still on generation %d after growing to %d keys", gen0, n)
	}
	// Delete most and insert new ones: compaction keeps the file bounded.
	size := w.Size()
	for round := range 5 {
		for i := range n {
			k := fmt.Sprintf("key-%07d", i+round*n)
			if err := w.Delete("t", k, Stamp{HLC: uint64(n + i)}); err != nil {
				t.Fatal(err)
			}
			if err := w.Put("t", fmt.Sprintf("key-%07d", i+(round+1)*n), "", []byte("new"), Stamp{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if w.Size() > size*3/2 {
		t.Errorf("file grew from %d to %d bytes with a constant number of keys", size, w.Size())
	}
	keys, err := r.Keys("t")
	if err != nil || len(keys) != n || keys[0] != fmt.Sprintf("key-%07d", 5*n) {
		t.Fatalf("keys after compactions: %d %v", len(keys), err)
	}
	// Old generations are gone from the directory.
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Errorf("directory holds %d files", len(ents))
	}
}

func TestRestartSupersedes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "view")
	w := newWriter(t, path)
	w.SetReady(true)
	w.Put("t", "k", "", []byte("one"), Stamp{HLC: 1})
	w.Heartbeat(time.Now())
	r := openReader(t, path)
	if err := r.Fresh(time.Minute); err != nil {
		t.Fatal(err)
	}
	// A writer killed without Close: the next one supersedes its file.
	w2 := newWriter(t, path)
	if _, _, _, err := r.Get("t", "k"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("before the new writer is ready: %v", err)
	}
	w2.Put("t", "k", "", []byte("two"), Stamp{HLC: 2})
	w2.SetReady(true)
	if v, _, _, err := r.Get("t", "k"); string(v) != "two" || err != nil {
		t.Fatalf("after restart: %q %v", v, err)
	}
	if err := r.Fresh(time.Nanosecond); !errors.Is(err, ErrStale) {
		t.Errorf("fresh with an old heartbeat: %v", err)
	}
	w2.Heartbeat(time.Now())
	if err := r.Fresh(time.Minute); err != nil {
		t.Errorf("fresh: %v", err)
	}
	// The first writer closed late (after the second superseded its file)
	// leaves the superseded mark: readers still move on.
	r1 := openReader(t, path)
	w3 := newWriter(t, path)
	w2.Close()
	w3.SetReady(true)
	if _, _, _, err := r1.Get("t", "k"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a reader of a file closed after it was superseded: %v", err)
	}
	w3.Close()
	if err := r.Fresh(time.Minute); !errors.Is(err, ErrNotReady) {
		t.Errorf("fresh after close: %v", err)
	}
}

// TestHash checks Hash against hash/crc32 (and so zlib.crc32) over the
// same bytes, for lengths around the 8-byte steps, and fixed values the
// Python reader's tests use too.
func TestHash(t *testing.T) {
	fmix := func(h uint32) uint32 {
		h ^= h >> 16
		h *= 0x85ebca6b
		h ^= h >> 13
		h *= 0xc2b2ae35
		h ^= h >> 16
		return max(h, 1)
	}
	for tl := range 20 {
		for kl := range 20 {
			topic, key := strings.Repeat("t", tl), strings.Repeat("\\xfe", kl)
			b := append([]byte{byte(tl), 0}, topic+key...)
			if got, want := Hash(topic, key), fmix(crc32.ChecksumIEEE(b)); got != want {
				t.Fatalf("Hash(%d, %d bytes) = %d, want %d", tl, kl, got, want)
			}
		}
	}
	for _, c := range []struct {
		topic, key string
		want       uint32
	}{{"prices", "sku-1", 2781460982}, {"", "", 2259668196}, {"fx", "eur/usd", 3588776657}} {
		if got := Hash(c.topic, c.key); got != c.want {
			t.Errorf("Hash(%q, %q) = %d, want %d", c.topic, c.key, got, c.want)
		}
	}
}

// TestTryPut: TryPut writes what fits and refuses, changing nothing, what
// would need a new generation.
func TestTryPut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "view")
	w, err := create(path, WriterOptions{GID: -1}, 64, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	gen := w.Generation()
	n := 0
	for ; ; n++ {
		ok, err := w.TryPut("t", fmt.Sprint("k", n), "", []byte("value"), Stamp{})
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
	}
	if w.Generation() != gen || w.Len() != n || n == 0 {
		t.Fatalf("after %d TryPuts: generation %d (was %d), %d keys", n, w.Generation(), gen, w.Len())
	}
	if err := w.Put("t", fmt.Sprint("k", n), "", []byte("value"), Stamp{}); err != nil || w.Generation() == gen || w.Len() != n+1 {
		t.Fatalf("Put after TryPut refused: %v, generation %d, %d keys", err, w.Generation(), w.Len())
	}
}

// TestOrphanedFile: a file nobody marked superseded that is no longer the
// path's (its directory deleted, its daemon killed and a new one started
// on a new file) is noticed by Get within orphanCheckEvery reads once its
// heartbeat is old; a file whose writer still beats is read on.
func TestOrphanedFile(t *testing.T) {
	cases := []struct {
		name      string
		heartbeat time.Duration // before now
		replace   func(t *testing.T, dir, path string)
		want      func(v []byte, err error) bool
	}{
		{"directory deleted", 2 * time.Second,
			func(t *testing.T, dir, _ string) { os.RemoveAll(dir) },
			func(_ []byte, err error) bool { return errors.Is(err, ErrNotReady) }},
		{"new writer on a new file", 2 * time.Second,
			func(t *testing.T, _, path string) {
				os.Remove(path)
				w := newWriter(t, path)
				w.Put("t", "k", "", []byte("two"), Stamp{HLC: 2})
				w.SetReady(true)
			},
			func(v []byte, err error) bool { return err == nil && string(v) == "two" }},
		{"closed, then a new writer on a new file", 2 * time.Second,
			func(t *testing.T, _, path string) {
				os.Remove(path)
				w := newWriter(t, path)
				w.Put("t", "k", "", []byte("two"), Stamp{HLC: 2})
				w.SetReady(true)
			},
			func(v []byte, err error) bool { return err == nil && string(v) == "two" }},
		{"writer still beating", 0,
			func(t *testing.T, dir, _ string) { os.RemoveAll(dir) },
			func(v []byte, err error) bool { return false }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			os.Mkdir(dir, 0o755)
			path := filepath.Join(dir, "view")
			w := newWriter(t, path)
			w.Put("t", "k", "", []byte("one"), Stamp{HLC: 1})
			w.SetReady(true)
			w.Heartbeat(time.Now().Add(-c.heartbeat))
			r := openReader(t, path)
			if v, _, _, err := r.Get("t", "k"); err != nil || string(v) != "one" {
				t.Fatalf("before: %q %v", v, err)
			}
			if strings.HasPrefix(c.name, "closed") {
				w.Close() // readers: not ready, and nobody will supersede it
			}
			c.replace(t, dir, path)
			for i := range 2 * orphanCheckEvery {
				if c.heartbeat == 0 {
					w.Heartbeat(time.Now())
				}
				v, _, _, err := r.Get("t", "k")
				if c.want(v, err) {
					return
				}
				if strings.HasPrefix(c.name, "closed") && errors.Is(err, ErrNotReady) {
					continue
				}
				if err != nil || string(v) != "one" {
					t.Fatalf("read %d: %q %v", i, v, err)
				}
			}
			if c.heartbeat != 0 {
				t.Fatalf("not noticed in %d reads", 2*orphanCheckEvery)
			}
		})
	}
}

// TestTopicCache: the kept topic CRC gives Hash's answer whatever the
// order of the topics, for long topics (not kept) and for a topic string
// over a buffer the caller rewrites between calls.
func TestTopicCache(t *testing.T) {
	c := topicCache{n: -1}
	long := strings.Repeat("t", 100)
	buf := []byte("prices")
	reused := unsafe.String(&buf[0], len(buf))
	for i, tk := range [][2]string{{"prices", "a"}, {"prices", "b"}, {"fx", "a"}, {"", ""}, {long, "a"}, {long, "b"}, {"prices", "a"}, {reused, "k"}} {
		if got, want := c.hash(tk[0], tk[1]), Hash(tk[0], tk[1]); got != want {
			t.Errorf("%d: hash(%q, %q) = %d, want %d", i, tk[0], tk[1], got, want)
		}
	}
	copy(buf, "pricez") // the same string header, other bytes
	if got, want := c.hash(reused, "k"), Hash("pricez", "k"); got != want {
		t.Errorf("after the caller rewrote its buffer: %d, want %d", got, want)
	}
}

// TestTouchChangesNothing: Touch of keys held, keys not held and keys of
// topics the file has not seen leaves every byte of the file as it was,
// called again with fewer keys (its scratch kept) too.
func TestTouchChangesNothing(t *testing.T) {
	w := newWriter(t, filepath.Join(t.TempDir(), "view"))
	w.SetReady(true)
	for i := range 50 {
		if err := w.Put("prices", fmt.Sprint("k", i), "", []byte(strings.Repeat("v", i*7)), Stamp{HLC: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	keys := [][2]string{{"prices", "k3"}, {"prices", "missing"}, {"stock", "k3"}, {"prices", "k49"}, {"", ""}}
	for i := range 40 {
		keys = append(keys, [2]string{"prices", fmt.Sprint("k", i)})
	}
	before := slices.Clone(w.m)
	for _, n := range []int{len(keys), 3, 0} {
		w.Touch(n, func(i int) (string, string) { return keys[i][0], keys[i][1] })
		if !slices.Equal(w.m, before) {
			t.Fatalf("Touch of %d keys changed the file", n)
		}
	}
}
