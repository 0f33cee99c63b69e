package localview

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestAppendValue: AppendValue finds the version of a key it is asked
// for, with a tag or without, appended after what dst holds, whatever
// at it is given (none, the key's own, another key's, the middle of a
// record, a whole record of the key forged inside another key's value,
// past the file's end), and answers the key's own at; not another
// version, a deleted or unknown key, or anything once the writer closed.
// WarmAt takes any at.
func TestAppendValue(t *testing.T) {
	w := newWriter(t, filepath.Join(t.TempDir(), "view"))
	st := Stamp{HLC: 7, Origin: 1, Seq: 3}
	for _, c := range []struct{ key, tag, value string }{{"plain", "", "12.50"}, {"tagged", "eu", "13.75"}, {"empty", "us", ""}} {
		if err := w.Put("prices", c.key, c.tag, []byte(c.value), st); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Delete("prices", "plain2", st); err != nil {
		t.Fatal(err)
	}
	if err := w.Put("prices", "gone", "", []byte("x"), st); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete("prices", "gone", Stamp{HLC: 8, Origin: 1, Seq: 4}); err != nil {
		t.Fatal(err)
	}
	if err := w.Put("prices", "carrier", "", forged("prices", "plain", "forged", st), st); err != nil {
		t.Fatal(err)
	}
	w.RLock()
	_, tagged, ok := w.AppendValue(nil, "prices", "tagged", st, 0)
	_, carrier, ok2 := w.AppendValue(nil, "prices", "carrier", st, 0)
	w.RUnlock()
	if !ok || tagged == 0 || !ok2 || carrier == 0 {
		t.Fatalf("tagged: at %d, %v; carrier: at %d, %v", tagged, ok, carrier, ok2)
	}
	// The forged record of plain, a whole one with plain's stamp, in
	// carrier's value.
	inValue := uint32(dataAt(int(carrier)*8, len("prices"), len("carrier")) / 8)
	for _, c := range []struct {
		key  string
		st   Stamp
		want string // "-": not found
	}{
		{"plain", st, "12.50"},
		{"tagged", st, "13.75"},
		{"empty", st, ""},
		{"plain", Stamp{HLC: 7, Origin: 1, Seq: 4}, "-"},
		{"plain", Stamp{HLC: 8, Origin: 1, Seq: 3}, "-"},
		{"tagged", Stamp{HLC: 7, Origin: 2, Seq: 3}, "-"},
		{"gone", st, "-"},
		{"gone", Stamp{HLC: 8, Origin: 1, Seq: 4}, "-"},
		{"unknown", st, "-"},
	} {
		w.RLock()
		_, own, _ := w.AppendValue(nil, "prices", c.key, st, 0)
		ats := []uint32{0, own, tagged, tagged + 1, inValue, uint32(w.Size() / 8), ^uint32(0)}
		w.WarmAt(ats)
		for _, at := range ats {
			got, where, ok := w.AppendValue([]byte("pre|"), "prices", c.key, c.st, at)
			switch {
			case c.want == "-" && (ok || string(got) != "pre|" || where != 0):
				t.Errorf("%s %+v, at %d: %q %v at %d, want nothing appended", c.key, c.st, at, got, ok, where)
			case c.want != "-" && (!ok || string(got) != "pre|"+c.want || where != own || own == 0):
				t.Errorf("%s %+v, at %d: %q %v at %d, want %q at %d", c.key, c.st, at, got, ok, where, "pre|"+c.want, own)
			}
		}
		w.RUnlock()
	}
	w.Close()
	w.RLock()
	defer w.RUnlock()
	w.WarmAt([]uint32{tagged})
	if got, _, ok := w.AppendValue(nil, "prices", "plain", st, tagged); ok {
		t.Errorf("after Close: %q %v", got, ok)
	}
}

// forged is a view file's record of (topic, key) holding value at the
// version stamped st, as the writer lays one out: what a value may hold
// to pass for a record where a stale at points.
func forged(topic, key, value string, st Stamp) []byte {
	b := make([]byte, dataAt(0, len(topic), len(key))+align8(len(value)))
	binary.LittleEndian.PutUint64(b[recVersion:], 2)
	binary.LittleEndian.PutUint64(b[recHLC:], st.HLC)
	binary.LittleEndian.PutUint64(b[recOrigin:], st.Origin)
	binary.LittleEndian.PutUint64(b[recSeq:], st.Seq)
	binary.LittleEndian.PutUint32(b[recValueLen:], uint32(len(value)))
	binary.LittleEndian.PutUint32(b[recCap:], uint32(align8(len(value))))
	binary.LittleEndian.PutUint16(b[recTopicLen:], uint16(len(topic)))
	binary.LittleEndian.PutUint16(b[recKeyLen:], uint16(len(key)))
	copy(b[recordHeader:], topic+key)
	copy(b[dataAt(0, len(topic), len(key)):], value)
	return b
}

// TestAppendValueStaleAt: the at of every key, kept from before the file
// grew into a new generation (the keys rehashed into a table of another
// size, their records moved), still finds each key's value, and the
// answer is its record's place in the new generation, which a read then
// takes.
func TestAppendValueStaleAt(t *testing.T) {
	w := newWriter(t, filepath.Join(t.TempDir(), "view"))
	const keys = 2000
	st := Stamp{HLC: 1, Origin: 1}
	value := func(i int) string { return fmt.Sprintf("value of %d %s", i, strings.Repeat("v", i%50)) }
	key := func(i int) string { return fmt.Sprintf("k%06d", i) }
	ats := make([]uint32, keys)
	for i := range keys {
		if err := w.Put("t", key(i), "", []byte(value(i)), st); err != nil {
			t.Fatal(err)
		}
		w.RLock()
		_, ats[i], _ = w.AppendValue(nil, "t", key(i), st, 0)
		w.RUnlock()
	}
	gen := w.Generation()
	for i := keys; w.Generation() < gen+2; i++ { // two growths: other keys in the old slots
		if err := w.Put("t", key(i), "", []byte(value(i)), st); err != nil {
			t.Fatal(err)
		}
	}
	moved := 0
	w.RLock()
	defer w.RUnlock()
	w.WarmAt(ats)
	for i, at := range ats {
		got, now, ok := w.AppendValue(nil, "t", key(i), st, at)
		if !ok || string(got) != value(i) || now == 0 {
			t.Fatalf("%s with the at of two generations before (%d): %q %v at %d", key(i), at, got, ok, now)
		}
		if now != at {
			moved++
		}
		if again, at2, ok := w.AppendValue(nil, "t", key(i), st, now); !ok || string(again) != value(i) || at2 != now {
			t.Fatalf("%s with its new at %d: %q %v at %d", key(i), now, again, ok, at2)
		}
	}
	if moved == 0 {
		t.Fatal("no key moved: the test grew nothing")
	}
}

// TestAppendValueWhileGrowing has goroutines read values with
// AppendValue while the writer rewrites them in place and adds keys, so
// that the file grows into new generations (the old one unmapped under
// the readers): every read finds its key's current version or, between
// the writer's store and the reader's look, the next one, each reader
// passing the at of its key's last read (stale after a growth). Run it
// with -race.
func TestAppendValueWhileGrowing(t *testing.T) {
	w := newWriter(t, filepath.Join(t.TempDir(), "view"))
	const hot = 64
	value := func(k string, v uint64) []byte { return fmt.Appendf(nil, "%s=%d/%s", k, v, strings.Repeat("v", 60)) }
	var mu sync.Mutex // the versions readers may ask for
	versions := make([]uint64, hot)
	put := func(i int, v uint64) {
		k := fmt.Sprintf("hot%02d", i)
		if err := w.Put("t", k, "", value(k, v), Stamp{HLC: v, Origin: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range hot {
		versions[i] = 1
		put(i, 1)
	}
	gen := w.Generation()
	stop := make(chan struct{})
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			var at uint32
			ats := make([]uint32, hot) // where each key was last found
			for n := g; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				i := n % hot
				mu.Lock()
				v := versions[i]
				mu.Unlock()
				k := fmt.Sprintf("hot%02d", i)
				var ok bool
				w.RLock()
				buf, at, ok = w.AppendValue(buf[:0], "t", k, Stamp{HLC: v, Origin: 1}, ats[i])
				w.RUnlock()
				if ok {
					ats[i] = at // kept across growths: stale ones are checked
				}
				if ok && string(buf) != string(value(k, v)) {
					errs <- fmt.Errorf("%s version %d: %q", k, v, buf)
					return
				}
			}
		}()
	}
	for n := range 200_000 {
		if n%4 == 0 {
			k := fmt.Sprintf("cold%06d", n)
			if err := w.Put("t", k, "", value(k, 1), Stamp{HLC: 1}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		i := n % hot
		mu.Lock()
		versions[i]++
		v := versions[i]
		mu.Unlock()
		put(i, v)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if w.Generation() == gen {
		t.Fatal("the file never grew")
	}
	for i := range hot {
		k := fmt.Sprintf("hot%02d", i)
		w.RLock()
		got, _, ok := w.AppendValue(nil, "t", k, Stamp{HLC: versions[i], Origin: 1}, 0)
		w.RUnlock()
		if !ok || string(got) != string(value(k, versions[i])) {
			t.Fatalf("%s at the end: %q %v", k, got, ok)
		}
	}
}
