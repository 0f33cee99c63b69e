package localview

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestAppendValue: AppendValue finds the version of a key it is asked
// for, with a tag or without, appended after what dst holds, with Warm's
// hint or without one; not another version, a deleted or unknown key, or
// anything once the writer closed. WarmMany's hints are Warm's.
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
		// No hint, Warm's, and the key's hash with another key's record
		// (which AppendValue must not take for the key's).
		hints := []uint64{0, w.Warm("prices", c.key), w.Warm("prices", c.key)&^0xffffffff | w.Warm("prices", "tagged")&0xffffffff}
		many := make([]uint64, 4)
		w.WarmMany([]string{"prices", "prices", "stock", "prices"}, []string{"tagged", c.key, c.key, c.key}, many)
		if want := []uint64{w.Warm("prices", "tagged"), hints[1], w.Warm("stock", c.key), hints[1]}; !slices.Equal(many, want) {
			t.Errorf("%s: WarmMany's hints %x, Warm's %x", c.key, many, want)
		}
		for _, hint := range hints {
			got, ok := w.AppendValue([]byte("pre|"), "prices", c.key, c.st, hint)
			switch {
			case c.want == "-" && (ok || string(got) != "pre|"):
				t.Errorf("%s %+v, hint %x: %q %v, want nothing appended", c.key, c.st, hint, got, ok)
			case c.want != "-" && (!ok || string(got) != "pre|"+c.want):
				t.Errorf("%s %+v, hint %x: %q %v, want %q", c.key, c.st, hint, got, ok, "pre|"+c.want)
			}
		}
		w.RUnlock()
	}
	w.Close()
	w.RLock()
	defer w.RUnlock()
	if got, ok := w.AppendValue(nil, "prices", "plain", st, 0); ok {
		t.Errorf("after Close: %q %v", got, ok)
	}
}

// TestAppendValueWhileGrowing has goroutines read values with
// AppendValue while the writer rewrites them in place and adds keys, so
// that the file grows into new generations (the old one unmapped under
// the readers): every read finds its key's current version or, between
// the writer's store and the reader's look, the next one. Run it with
// -race.
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
				hint := w.Warm("t", k)
				buf, ok = w.AppendValue(buf[:0], "t", k, Stamp{HLC: v, Origin: 1}, hint)
				w.RUnlock()
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
		got, ok := w.AppendValue(nil, "t", k, Stamp{HLC: versions[i], Origin: 1}, 0)
		w.RUnlock()
		if !ok || string(got) != string(value(k, versions[i])) {
			t.Fatalf("%s at the end: %q %v", k, got, ok)
		}
	}
}
