package view

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/store/record"
)

// fileFollower is the daemon's mirror reduced to what the view's side of
// the two-state item needs (daemon/internal/mirror is the real one): it
// follows the view, writes each group of changes into a real view file
// at the group's end, under the view's lock, and then tells the view
// (FileWritten), whose items may keep their values there only. While it
// loads the view into the file (loading: reload), it queues the groups
// instead, as the mirror does.
type fileFollower struct {
	v       *View
	w       *localview.Writer
	group   []Change
	loading bool
	queued  []Change
}

func (f *fileFollower) RLock()              { f.w.RLock() }
func (f *fileFollower) RUnlock()            { f.w.RUnlock() }
func (f *fileFollower) WarmAt(ats []uint32) { f.w.WarmAt(ats) }

func (f *fileFollower) AppendValue(dst []byte, topic, key string, st record.Stamp, at uint32) ([]byte, uint32, bool) {
	return f.w.AppendValue(dst, topic, key, localview.Stamp{HLC: st.HLC, Origin: st.Origin, Seq: st.Seq}, at)
}

func (f *fileFollower) end() {
	if f.loading {
		f.queued = append(f.queued, f.group...)
	} else {
		for _, c := range f.group {
			f.write(c)
		}
		f.v.FileWritten(f, f.group)
	}
	clear(f.group)
	f.group = f.group[:0]
}

// write writes c into the file.
func (f *fileFollower) write(c Change) {
	st := localview.Stamp{HLC: c.Stamp.HLC, Origin: c.Stamp.Origin, Seq: c.Stamp.Seq}
	var err error
	if c.Deleted {
		err = f.w.Delete(c.Topic, c.Key, st)
	} else {
		err = f.w.Put(c.Topic, c.Key, c.Tag, c.Value, st)
	}
	if err != nil {
		panic(err) // a test's tmpfs or disk: nothing to recover
	}
}

// newFollower is a follower of v with a new view file in a temporary
// directory, which it does not follow yet.
func newFollower(tb testing.TB, v *View) *fileFollower {
	tb.Helper()
	w, err := localview.Create(filepath.Join(tb.TempDir(), "view"), localview.WriterOptions{GID: -1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		v.FollowFrom(nil, nil)
		v.Unfile()
		w.Close()
	})
	return &fileFollower{v: v, w: w}
}

// followFile makes v keep its values in a view file in a temporary
// directory, from its next change on (v is empty or its values stay on
// the heap).
func followFile(tb testing.TB, v *View) *fileFollower {
	tb.Helper()
	f := newFollower(tb, v)
	v.FollowFrom(func(c Change) { f.group = append(f.group, c) }, f.end)
	return f
}

// fileTwins is a view keeping its values in a file beside one that keeps
// them on the heap, given the same records: whatever the two-state item
// does, a reader must not tell them apart.
type fileTwins struct {
	v, twin *View
	file    *fileFollower
	clock   *fakeClock
	keys    [][2]string
	// frozen clones of both taken at one instant, compared at each
	// check: the file's records are rewritten under them meanwhile.
	frozen [][2]Frozen
	// loaded is the most values a reload left in the file only.
	loaded int
	// buf is the buffer of the last GetInto or GetMany of v, passed to
	// the next one scribbled over.
	buf []byte
}

// scribble fills all of buf's room with a byte no value of the tests
// holds, so that a read into it (from its start, whatever its length)
// cannot pass on what the read before left there.
func scribble(buf []byte) []byte {
	buf = buf[:cap(buf)]
	for i := range buf {
		buf[i] = 0xfe
	}
	return buf
}

func newFileTwins(t *testing.T) *fileTwins {
	c := &fakeClock{}
	c.ms.Store(timeBase)
	ft := &fileTwins{v: newTimedView(c), twin: newTimedView(c), clock: c}
	ft.file = followFile(t, ft.v)
	for _, topic := range []string{"prices", "stock"} {
		for i := range 6 {
			ft.keys = append(ft.keys, [2]string{topic, fmt.Sprintf("k%02d", i)})
		}
	}
	ft.keys = append(ft.keys, [2]string{"prices", "k"}) // the counter tests' key
	return ft
}

func (ft *fileTwins) apply(rs ...record.Record) {
	if len(rs) == 1 {
		ft.v.Apply(rs[0])
		ft.twin.Apply(rs[0])
		return
	}
	ft.v.ApplyBatch(rs)
	ft.twin.ApplyBatch(rs)
}

// check compares everything a reader sees of the twins.
func (ft *fileTwins) check(t *testing.T, step int) {
	t.Helper()
	if a, b := ft.v.Digest(), ft.twin.Digest(); a != b {
		t.Fatalf("step %d: digests differ", step)
	}
	for _, v := range []*View{ft.v, ft.twin} {
		if err := indexAgrees(v); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	// GetMany of every key, and of every key twice (more keys than
	// GetMany keeps on its stack).
	var topics, keys []string
	for i, k := range ft.keys {
		topics, keys = append(topics, k[0]), append(keys, k[1])
		g, gok := ft.v.Get(k[0], k[1])
		w, wok := ft.twin.Get(k[0], k[1])
		if err := sameEntry(g, w, gok, wok); err != nil {
			t.Fatalf("step %d: Get(%s, %s): %v", step, k[0], k[1], err)
		}
		// GetInto with the buffer of the read before, scribbled over.
		g, ft.buf, gok = ft.v.GetInto(scribble(ft.buf), k[0], k[1])
		if err := sameEntry(g, w, gok, wok); err != nil {
			t.Fatalf("step %d: GetInto(%s, %s): %v", step, k[0], k[1], err)
		}
		if i == len(ft.keys)-1 {
			ft.checkMany(t, step, topics, keys)
		}
	}
	// WarmReads (every key, twice) changes nothing a reader sees.
	topics, keys = append(topics, topics...), append(keys, keys...)
	inFile := ft.v.ValuesInFile()
	ft.v.WarmReads(topics, keys)
	ft.twin.WarmReads(topics, keys)
	if n := ft.v.ValuesInFile(); n != inFile {
		t.Fatalf("step %d: %d values in the file after WarmReads, %d before", step, n, inFile)
	}
	ft.checkMany(t, step, topics, keys)
	for i, p := range ft.frozen {
		a, b := p[0].Digests(), p[1].Digests()
		for topic, d := range b {
			if a[topic] != d {
				t.Fatalf("step %d: frozen clone %d: topic %s's digest differs", step, i, topic)
			}
		}
	}
	var sa, sb bytes.Buffer
	if err := EncodeSnapshot(&sa, ft.v, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := EncodeSnapshot(&sb, ft.twin, 1, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sa.Bytes(), sb.Bytes()) {
		t.Fatalf("step %d: snapshots differ", step)
	}
}

// checkMany compares the twins' GetMany of keys: the values are equal,
// and each is a slice of its own (appending to one changes no other).
func (ft *fileTwins) checkMany(t *testing.T, step int, topics, keys []string) {
	t.Helper()
	got, want := make([]Entry, len(keys)), make([]Entry, len(keys))
	gotOK, wantOK := make([]bool, len(keys)), make([]bool, len(keys))
	ft.buf = ft.v.GetMany(topics, keys, got, gotOK, scribble(ft.buf))
	ft.twin.GetMany(topics, keys, want, wantOK, nil)
	for round := range 2 {
		for i := range keys {
			if err := sameEntry(got[i], want[i], gotOK[i], wantOK[i]); err != nil {
				t.Fatalf("step %d: GetMany of %d keys, round %d: %s: %v", step, len(keys), round, keys[i], err)
			}
		}
		for i := range got {
			_ = append(got[i].Value, '!')
		}
	}
}

func sameEntry(g, w Entry, gok, wok bool) error {
	switch {
	case gok != wok:
		return fmt.Errorf("found %v, want %v", gok, wok)
	case !bytes.Equal(g.Value, w.Value) || g.Tag != w.Tag || g.Stamp != w.Stamp || g.ExpiresAt != w.ExpiresAt ||
		g.EffectiveAt != w.EffectiveAt || !bytes.Equal(g.Base, w.Base):
		return fmt.Errorf("%q %q %v exp %d eff %d base %q, want %q %q %v exp %d eff %d base %q", g.Value, g.Tag, g.Stamp,
			g.ExpiresAt, g.EffectiveAt, g.Base, w.Value, w.Tag, w.Stamp, w.ExpiresAt, w.EffectiveAt, w.Base)
	}
	return nil
}

// TestFileValuesAsOnTheHeap applies random records of every kind
// (plain writes of values of every size, deletes, scheduled records,
// cancels, expiring values, expiry changes, counter increments; alone
// and in batches) to a view that keeps its values in a view file and to
// one that keeps them on the heap, with frozen clones of both taken at
// random and kept while later writes rewrite the file's records, and the
// file let go at random (Unfile) and taken again: after each step every
// read (Get, GetMany, Digest, each clone's digests, the snapshot's bytes)
// must be the same. Values, expiring ones among them, must have been in
// the file only at some step, or the test tested nothing.
func TestFileValuesAsOnTheHeap(t *testing.T) {
	seed := propertySeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0xf11e))
	ft := newFileTwins(t)
	seqs := map[uint64]uint64{}
	maxInFile, widePeak := 0, 0
	for step := range 600 {
		now := ft.clock.ms.Add(int64(rng.IntN(40)))
		origin := uint64(1 + rng.IntN(3))
		next := func() (uint64, uint64, uint64) {
			seqs[origin]++
			return origin, seqs[origin], record.MakeHLC(now+int64(rng.IntN(5)), uint16(seqs[origin]))
		}
		var rs []record.Record
		key := -1 // any key
		if rng.IntN(4) == 0 {
			key = rng.IntN(len(ft.keys)) // a batch of one key's records
		}
		for range 1 + rng.IntN(3) {
			rs = append(rs, ft.randomRecord(t, rng, key, now, next))
		}
		held := rng.IntN(8) == 0
		if held {
			// One group for the follower, with a freeze inside it: the
			// items of its first changes are in a clone when it ends.
			ft.v.Hold()
			ft.twin.Hold()
			ft.apply(rs[0])
			ft.freeze()
			rs = rs[1:]
		}
		if rng.IntN(2) == 0 && len(rs) > 1 {
			ft.apply(rs...)
		} else {
			for _, r := range rs {
				ft.apply(r)
			}
		}
		if held {
			ft.v.Release()
			ft.twin.Release()
		}
		switch p := rng.IntN(20); {
		case p == 0:
			ft.freeze()
		case p == 1:
			ft.v.Unfile() // the next change takes the file again
		case p == 2:
			ft.reload(t, rng, func() { ft.apply(ft.randomRecord(t, rng, -1, now, next)) })
		}
		maxInFile = max(maxInFile, ft.v.ValuesInFile())
		if wideInFile(ft.v) > 0 {
			widePeak++
		}
		ft.check(t, step)
	}
	if maxInFile == 0 || ft.loaded == 0 || widePeak == 0 {
		t.Fatalf("values in the file only: at most %d, after a reload at most %d, expiring ones after %d steps: the test tested nothing",
			maxInFile, ft.loaded, widePeak)
	}
	t.Logf("at most %d of %d keys had their value in the file only, %d after a reload; expiring ones after %d of the steps",
		maxInFile, len(ft.keys), ft.loaded, widePeak)
}

// reload has the view's values loaded into a new file, as the mirror
// does when it starts over (a restart's snapshot and replay, a write
// error): the follower stops, the view takes its values back (Unfile), a
// new follower writes the view as FollowFrom returns it into a new file,
// telling the view of each chunk written (FileLoaded), while records
// applied meanwhile (applyOne) are queued and written after the load;
// the kept frozen clones read on.
func (ft *fileTwins) reload(t *testing.T, rng *rand.Rand, applyOne func()) {
	ft.v.FollowFrom(nil, nil)
	ft.v.Unfile()
	ft.file.w.Close()
	f := newFollower(t, ft.v)
	f.loading = true
	ft.file = f
	var chunk []Change
	for c := range ft.v.FollowFrom(func(c Change) { f.group = append(f.group, c) }, f.end) {
		f.write(c)
		chunk = append(chunk, c)
		if rng.IntN(3) == 0 {
			ft.v.FileLoaded(f, chunk)
			chunk = chunk[:0]
			if rng.IntN(2) == 0 {
				applyOne()
			}
		}
	}
	ft.v.FileLoaded(f, chunk)
	ft.loaded = max(ft.loaded, ft.v.ValuesInFile())
	f.loading = false
	for _, c := range f.queued {
		f.write(c)
	}
	ft.v.FileWrittenLater(f, f.queued)
	f.queued = nil
}

// freeze keeps a frozen clone of each twin, taken at one instant.
func (ft *fileTwins) freeze() {
	ft.frozen = append(ft.frozen, [2]Frozen{ft.v.Freeze(), ft.twin.Freeze()})
	if len(ft.frozen) > 3 {
		ft.frozen = ft.frozen[1:]
	}
}

// randomRecord is a record of the twins' key number key (-1: a random
// one), of a random kind.
func (ft *fileTwins) randomRecord(t *testing.T, rng *rand.Rand, key int, now int64, next func() (uint64, uint64, uint64)) record.Record {
	if key < 0 {
		key = rng.IntN(len(ft.keys))
	}
	k := ft.keys[key]
	o, s, h := next()
	value := fmt.Sprintf("%s=%d:%s", k[1], s, bytes.Repeat([]byte("v"), rng.IntN(3)*rng.IntN(90)))
	cur, found := ft.twin.Get(k[0], k[1])
	switch p := rng.IntN(20); {
	case p < 3 && k[0] == "prices":
		r := timeRec{key: k[1], value: value, origin: o, seq: s, hlc: h}
		switch rng.IntN(4) {
		case 0:
			r.eff = now + int64(rng.IntN(100)-20) // late ones in force at once
		case 1:
			r.expires = now + int64(1+rng.IntN(150))
		case 2:
			r.cancel, r.value, r.eff = true, "", now+int64(1+rng.IntN(100))
		default:
			r.del, r.value = true, ""
		}
		return r.record(t)
	case p < 5 && found && k == [2]string{"prices", "k"}:
		return incRec(t, fmt.Sprint(rng.IntN(7)-3), cur.Stamp, o, s, h)
	case p < 6 && found && k[0] == "prices" && cur.EffectiveAt == 0:
		return expiryRec(t, k[1], string(cur.Value), 0, cur.Stamp, now+int64(rng.IntN(200)), o, s, h)
	case p < 7:
		return viewDel(k[0], k[1], o, s, h).record(t)
	}
	r := viewPut(k[0], k[1], value, o, s, h)
	r.tag = []string{"", "", "eu"}[rng.IntN(3)]
	return r.record(t)
}

// TestFileClonesReadWhileRewritten has frozen clones hashed and point
// reads made by other goroutines while every key's file record is
// rewritten in place (values of the same size), moved (a larger one) and
// deleted, and the file grows into new generations (the old one
// unmapped): each clone keeps hashing as its twin's clone, taken at the
// same instant from a view that keeps its values on the heap, and every
// read value is one written for its key; then the same while the view's
// values are loaded into a new file (reload). Run it with -race.
func TestFileClonesReadWhileRewritten(t *testing.T) {
	ft := newFileTwins(t)
	const keys = 3000
	write := func(round int, size int, del bool) {
		rs := make([]record.Record, 0, 16)
		for i := range keys {
			k := fmt.Sprintf("key-%05d", i)
			st := uint64(round*keys + i + 1)
			if del && i%3 == 0 {
				rs = append(rs, viewDel("prices", k, 1, st, st).record(t))
			} else {
				rs = append(rs, viewPut("prices", k, fmt.Sprintf("%s/%d/%s", k, round, bytes.Repeat([]byte("x"), size)), 1, st, st).record(t))
			}
			if len(rs) == cap(rs) {
				ft.apply(rs...)
				rs = rs[:0]
			}
		}
		ft.apply(rs...)
	}
	write(0, 80, false)
	if n := ft.v.ValuesInFile(); n != keys {
		t.Fatalf("%d of %d values in the file only after the load", n, keys)
	}
	gen := ft.file.w.Generation()
	clones := [][2]Frozen{{ft.v.Freeze(), ft.twin.Freeze()}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	hash := func(p [2]Frozen) {
		defer wg.Done()
		want := p[1].Digests()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if got := p[0].Digests(); got["prices"] != want["prices"] {
				errs <- fmt.Errorf("a frozen clone's digest changed under a rewrite")
				return
			}
		}
	}
	wg.Add(2)
	go hash(clones[0])
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("key-%05d", rng.IntN(keys))
			if e, ok := ft.v.Get("prices", k); ok && !bytes.HasPrefix(e.Value, []byte(k+"/")) {
				errs <- fmt.Errorf("Get(%s) = %q", k, e.Value)
				return
			}
		}
	}()
	for round, size := range []int{80, 80, 200, 80, 400} {
		write(round+1, size, round == 3)
		if round == 1 {
			clones = append(clones, [2]Frozen{ft.v.Freeze(), ft.twin.Freeze()})
			wg.Add(1)
			go hash(clones[1])
		}
	}
	grew := ft.file.w.Generation() != gen
	// The clones read on while the view takes its values back and loads
	// them into a new file, as a mirror starting over does, with writes
	// queued meanwhile: the items they hold go into the file under them.
	clones = append(clones, [2]Frozen{ft.v.Freeze(), ft.twin.Freeze()})
	wg.Add(1)
	go hash(clones[2])
	st := uint64(10 * keys)
	ft.reload(t, rand.New(rand.NewPCG(3, 4)), func() {
		st++
		k := fmt.Sprintf("key-%05d", st%keys)
		ft.apply(viewPut("prices", k, k+"/reload", 1, st, st).record(t))
	})
	if n := ft.v.ValuesInFile(); n != keys {
		t.Errorf("%d of %d values in the file only after the reload", n, keys)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if !grew {
		t.Fatal("the file never grew: the test meant reads across a new generation")
	}
	ft.check(t, 0)
}

// TestFileUnfile checks that the view's values come back to the heap
// when it lets the file go, and stay right after the file is closed.
func TestFileUnfile(t *testing.T) {
	ft := newFileTwins(t)
	for i := range 100 {
		ft.apply(viewPut("stock", fmt.Sprintf("k%02d", i%6), fmt.Sprintf("value %d", i), 1, uint64(i+1), uint64(i+1)).record(t))
	}
	if n := ft.v.ValuesInFile(); n != 6 {
		t.Fatalf("%d of 6 values in the file only", n)
	}
	frozen := [2]Frozen{ft.v.Freeze(), ft.twin.Freeze()}
	ft.v.FollowFrom(nil, nil)
	ft.v.Unfile()
	if err := ft.file.w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := ft.v.ValuesInFile(); n != 0 {
		t.Fatalf("%d values in the file after Unfile", n)
	}
	ft.frozen = append(ft.frozen, frozen)
	ft.check(t, 0)
}

// TestFilePlacesAcrossGrowth: the place in the file an item keeps from
// its last read (viewItem.at) goes stale when the file grows into new
// generations (every key rehashed into a bigger table), or names another
// key's record: a read with it still finds the item's own value (Get,
// GetMany), and keeps the key's new place, which the next read finds
// right (it keeps it). A write of a key gives its new item the place
// of the one before.
func TestFilePlacesAcrossGrowth(t *testing.T) {
	v := New()
	f := followFile(t, v)
	key := func(i int) string { return fmt.Sprintf("sku-%07d", i) }
	version := 1
	value := func(i int) string { return fmt.Sprintf("price %d of %d: %s", version, i, strings.Repeat("9", i%40)) }
	put := func(i int) {
		v.Apply(viewPut("prices", key(i), value(i), 1, uint64(version<<20+i), uint64(version<<20+i)).record(t))
	}
	const keys = 3000
	for i := range keys {
		put(i)
	}
	items := make([]*viewItem, keys)
	places := func() []uint32 {
		ats := make([]uint32, keys)
		for i := range keys {
			ats[i] = items[i].at()
		}
		return ats
	}
	read := func(step string) {
		t.Helper()
		for i := range keys {
			if e, ok := v.Get("prices", key(i)); !ok || string(e.Value) != value(i) {
				t.Fatalf("%s: Get(%s) = %q %v, want %q", step, key(i), e.Value, ok, value(i))
			}
		}
		topics, names := make([]string, keys), make([]string, keys)
		for i := range keys {
			topics[i], names[i] = "prices", key(i)
		}
		entries, found := make([]Entry, keys), make([]bool, keys)
		v.GetMany(topics, names, entries, found, nil)
		for i := range keys {
			if !found[i] || string(entries[i].Value) != value(i) {
				t.Fatalf("%s: GetMany's %s = %q %v, want %q", step, key(i), entries[i].Value, found[i], value(i))
			}
		}
	}
	for i := range keys {
		if items[i] = v.topics["prices"].byKey.get(key(i)); items[i] == nil || !items[i].inFile() || items[i].at() != 0 {
			t.Fatalf("%s: item %v, in the file %v, place %d before any read", key(i), items[i], items[i] != nil && items[i].inFile(), items[i].at())
		}
	}
	read("first reads")
	first := places()
	if i := slices.Index(first, 0); i >= 0 {
		t.Fatalf("%s kept no place from its read", key(i))
	}
	read("with the places")
	if !slices.Equal(places(), first) {
		t.Fatal("a read with the right places changed them")
	}
	gen := f.w.Generation()
	for i := keys; f.w.Generation() < gen+2; i++ {
		put(i)
	}
	read("after two growths")
	grown := places()
	moved := 0
	for i := range keys {
		if grown[i] != first[i] {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no key's place moved: the test grew nothing")
	}
	read("with the new places")
	if !slices.Equal(places(), grown) {
		t.Fatal("a read with the right places changed them")
	}
	// Each item given the place of the key after it.
	for i := range keys {
		atomic.StoreUint32(&items[i].state, inFile|grown[(i+1)%keys]<<stateBits)
	}
	read("with other keys' places")
	if !slices.Equal(places(), grown) {
		t.Fatal("the reads did not put the keys' own places back")
	}
	version = 2
	for i := range keys {
		put(i)
		if items[i] = v.topics["prices"].byKey.get(key(i)); !items[i].inFile() {
			t.Fatalf("%s not in the file after its write", key(i))
		}
	}
	for i, at := range places() {
		if at != grown[i] {
			t.Fatalf("%s's new item has the place %d, want the one before's, %d", key(i), at, grown[i])
		}
	}
	read("after a write of each key")
}

// BenchmarkViewGetFile is a Get of random keys among 1M (100-byte
// values; 10k: the Redis door's benchmark, in cache), the values on the
// heap or in the shared view file (what the two-state item costs a
// read); heap-B/key is the heap the view keeps.
func BenchmarkViewGetFile(b *testing.B) {
	for _, kw := range []struct {
		name string
		keys int
	}{{"10k", 10_000}, {"1M", 1_000_000}} {
		for _, where := range []string{"heap", "file"} {
			b.Run("keys="+kw.name+"/values="+where, func(b *testing.B) { benchGetFile(b, kw.keys, where) })
		}
	}
}

// benchGetFile is BenchmarkViewGetFile for keys keys, the values where.
func benchGetFile(b *testing.B, keys int, where string) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := New()
	if where == "file" {
		followFile(b, v)
	}
	loadSKUs(v, keys, bytes.Repeat([]byte("v"), 100))
	runtime.GC()
	runtime.ReadMemStats(&after)
	rng := rand.New(rand.NewPCG(1, 2))
	names := make([]string, 1<<16)
	for i := range names {
		names[i] = fmt.Sprintf("sku-%07d", rng.IntN(keys))
	}
	b.Run("read=get", func(b *testing.B) {
		b.ReportAllocs()
		cpu := testkit.StartThreadCPU()
		n := 0
		var buf []byte
		for ; b.Loop(); n++ {
			var e Entry
			var ok bool
			if e, buf, ok = v.GetInto(buf, "prices", names[n&(len(names)-1)]); !ok || len(e.Value) != 100 {
				b.Fatal("key not found")
			}
		}
		cpu.Report(b, n)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(keys), "heap-B/key")
	})
	// Gets of 16 keys after a WarmReads of them (a pipeline's run of
	// GETs through the Redis door); an op is a Get.
	b.Run("read=warm16", func(b *testing.B) {
		topics := slices.Repeat([]string{"prices"}, 16)
		b.ReportAllocs()
		cpu := testkit.StartThreadCPU()
		n := 0
		var buf []byte
		for ; b.Loop(); n++ {
			i := n & (len(names) - 1)
			if i%16 == 0 {
				v.WarmReads(topics, names[i:i+16])
			}
			var e Entry
			var ok bool
			if e, buf, ok = v.GetInto(buf, "prices", names[i]); !ok || len(e.Value) != 100 {
				b.Fatal("key not found")
			}
		}
		cpu.Report(b, n)
	})
	// An MGET of 10 keys (GetMany), each a random one.
	b.Run("read=many10", func(b *testing.B) {
		topics := slices.Repeat([]string{"prices"}, 10)
		entries, found := make([]Entry, 10), make([]bool, 10)
		b.ReportAllocs()
		cpu := testkit.StartThreadCPU()
		n := 0
		var buf []byte
		for ; b.Loop(); n++ {
			i := (n * 16) & (len(names) - 1)
			if buf = v.GetMany(topics, names[i:i+10], entries, found, buf); !found[9] || len(entries[9].Value) != 100 {
				b.Fatal("key not found")
			}
		}
		cpu.Report(b, n)
	})
}

// TestFileReadsAllocateNothing: a GetInto and a GetMany of values the
// view keeps in the file, each given the buffer the read before
// returned, allocate nothing (a read's own allocation was most of what
// the file cost a read over the heap); the values are right.
func TestFileReadsAllocateNothing(t *testing.T) {
	runs, slack := 50, 0.0
	if testkit.Race {
		runs, slack = 400, 0.999 // sync.Pool drops a Put in four under -race
	}
	v := New()
	followFile(t, v)
	const keys = 40
	topics, names, values := make([]string, keys), make([]string, keys), make([]string, keys)
	for i := range keys {
		topics[i], names[i] = "prices", fmt.Sprintf("sku-%02d", i)
		values[i] = fmt.Sprintf("%02d:%s", i, strings.Repeat("v", 10*i))
		v.Apply(viewRec{topic: "prices", key: names[i], value: values[i], origin: 1, seq: uint64(i + 1), hlc: uint64(i + 1)}.record(t))
	}
	if n := v.ValuesInFile(); n != keys {
		t.Fatalf("%d of %d values in the file", n, keys)
	}
	value := func(i int) string { return values[i] }
	var buf []byte
	i := 0
	allocs := testing.AllocsPerRun(runs, func() {
		var e Entry
		var ok bool
		k := (i * 7) % keys // the long values and the short ones in turn
		if e, buf, ok = v.GetInto(buf, "prices", names[k]); !ok || string(e.Value) != value(k) {
			t.Fatalf("GetInto(%s) = %v %q, want %q", names[k], ok, e.Value, value(k))
		}
		i++
	})
	if allocs != 0 {
		t.Errorf("a GetInto with the buffer of the one before allocated %v times, want 0", allocs)
	}
	if allocs = testing.AllocsPerRun(runs, func() { v.WarmReads(topics, names) }); allocs > slack {
		t.Errorf("a WarmReads of %d keys allocated %v times, want 0 (%v under -race)", keys, allocs, slack)
	}
	entries, found := make([]Entry, keys), make([]bool, keys)
	for _, n := range []int{10, keys} { // less than the scratch's first room, and more
		allocs = testing.AllocsPerRun(runs, func() {
			buf = v.GetMany(topics[:n], names[:n], entries, found, buf)
			for k := range n {
				if !found[k] || string(entries[k].Value) != value(k) {
					t.Fatalf("GetMany of %d: %s = %v %q, want %q", n, names[k], found[k], entries[k].Value, value(k))
				}
			}
		})
		if allocs > slack {
			t.Errorf("a GetMany of %d keys with the buffer of the one before allocated %v times, want 0 (%v under -race)", n, allocs, slack)
		}
	}
}

// hookedFile is a view's file whose next AppendValue runs before instead
// of reading, and fails: what a reader sees when the view changes files
// between its look at an item's state and its read.
type hookedFile struct {
	*fileFollower
	before func()
}

func (h *hookedFile) AppendValue(dst []byte, topic, key string, st record.Stamp, at uint32) ([]byte, uint32, bool) {
	if b := h.before; b != nil {
		h.before = nil
		b()
		return dst, 0, false
	}
	return h.fileFollower.AppendValue(dst, topic, key, st, at)
}

// TestFileCloneAcrossReload: a frozen clone finds an item in the file,
// and before its read there the view lets the file go and loads its
// values into a new one, the item included (a mirror starting over):
// the clone reads the item again, from the new file, where a look at
// the state after the failed read alone took it for a record lost.
func TestFileCloneAcrossReload(t *testing.T) {
	v, twin := New(), New()
	f1 := newFollower(t, v)
	h := &hookedFile{fileFollower: f1}
	v.FollowFrom(func(c Change) { f1.group = append(f1.group, c) }, func() {
		for _, c := range f1.group {
			f1.write(c)
		}
		v.FileWritten(h, f1.group)
		f1.group = f1.group[:0]
	})
	r := viewPut("prices", "sku-1", "12.50", 1, 1, 1).record(t)
	v.Apply(r)
	twin.Apply(r)
	if n := v.ValuesInFile(); n != 1 {
		t.Fatalf("%d values in the file, want 1", n)
	}
	clone, want := v.Freeze(), twin.Freeze().Digests()
	h.before = func() {
		// The mirror starting over (ft.reload): the value back to the
		// heap, then the view loaded into a new file, item and all.
		v.FollowFrom(nil, nil)
		v.Unfile()
		f2 := newFollower(t, v)
		for c := range v.FollowFrom(func(c Change) { f2.group = append(f2.group, c) }, f2.end) {
			f2.write(c)
			v.FileLoaded(f2, []Change{c})
		}
		if n := v.ValuesInFile(); n != 1 {
			t.Errorf("%d values in the new file, want 1", n)
		}
	}
	if got := clone.Digests(); got["prices"] != want["prices"] {
		t.Fatal("the clone's digest differs from the twin's")
	}
	if h.before != nil {
		t.Fatal("the clone never read the item from the file")
	}
}

// wideInFile counts v's entries with an expiry whose value is in the file
// only.
func wideInFile(v *View) int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	n := 0
	for _, tv := range v.topics {
		tv.order.Ascend(func(it *viewItem) bool {
			if it.inFile() && it.expiry() != 0 {
				n++
			}
			return true
		})
	}
	return n
}
