package daemon

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/internal/daemonhooks"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/localview/viewtest"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

// waitView polls the shared view until cond holds (a bounded wait on a
// condition, not a sleep).
func waitView(t *testing.T, r *localview.Reader, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "the view to show "+what, cond)
}

func TestViewFileMirrorsTheStore(t *testing.T) {
	cfg := testConfig(t)
	td := startDaemon(t, cfg)
	path := cfg.ViewPath()
	if !strings.HasSuffix(path, "/s.view") {
		t.Fatalf("auto view path %q", path)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("view file: %v %v", fi, err)
	}
	r, err := localview.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitView(t, r, "ready", func() bool { return r.Fresh(time.Second) == nil })

	pr := td.put("prices", "sku%2F1", "12.50", "Cachecast-Tag", "eu")
	var v []byte
	var tag string
	var st localview.Stamp
	waitView(t, r, "the put", func() bool {
		v, tag, st, err = r.Get("prices", "sku/1")
		return err == nil
	})
	if string(v) != "12.50" || tag != "eu" || st.Seq != pr.Seq || wire.FormatOrigin(st.Origin) != pr.Origin {
		t.Fatalf("view holds %q %q %+v, the put was %+v", v, tag, st, pr)
	}
	if r := td.do("DELETE", "/v1/topics/prices/keys/sku%2F1", nil); r.status/100 != 2 {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	waitView(t, r, "the delete", func() bool {
		_, _, _, err = r.Get("prices", "sku/1")
		return errors.Is(err, localview.ErrNotFound)
	})
	td.put("prices", "sku%2F2", "7")

	// A counter made on a key never held has no version: the file shows
	// the stamp every answer shows for it, 0 (record.Stamp.Shown), not
	// the view's record.Genesis.
	if r := td.do("POST", "/v1/topics/prices/counters/hits?by=3", nil); r.status/100 != 2 {
		t.Fatalf("POST counter: %d %s", r.status, r.body)
	}
	waitView(t, r, "the counter", func() bool {
		v, _, st, err = r.Get("prices", "hits")
		return err == nil
	})
	if string(v) != "3" || st != (localview.Stamp{}) {
		t.Fatalf("view holds the counter as %q %+v, want \"3\" stamped 0", v, st)
	}

	// Stopped: not ready. Restarted: the values again, in a new generation.
	gen := r.Generation()
	td.stop()
	if err := r.Fresh(time.Minute); !errors.Is(err, localview.ErrNotReady) {
		t.Fatalf("fresh after stop: %v", err)
	}
	startDaemon(t, cfg)
	waitView(t, r, "ready after restart", func() bool { return r.Fresh(time.Second) == nil })
	if v, _, _, err := r.Get("prices", "sku/2"); err != nil || string(v) != "7" || r.Generation() <= gen {
		t.Fatalf("after restart: %q %v, generation %d (was %d)", v, err, r.Generation(), gen)
	}
}

func TestViewFileOff(t *testing.T) {
	cfg := testConfig(t)
	cfg.ViewFile = ""
	startDaemon(t, cfg)
	auto := cfg
	auto.ViewFile = config.ViewFileAuto
	if _, err := os.Stat(auto.ViewPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("--view-file= made a file: %v", err)
	}
}

func TestViewFileInUse(t *testing.T) {
	cfg := testConfig(t)
	startDaemon(t, cfg)
	other := testConfig(t)
	other.ViewFile = cfg.ViewPath()
	if _, err := New(other, nil); err == nil || !strings.Contains(err.Error(), "--view-file: "+cfg.ViewPath()+" is in use") {
		t.Fatalf("second daemon on the view file: %v", err)
	}
}

// TestViewReadersUnderLoad: reader processes read the shared view while
// the daemon applies updates to the same keys as fast as it can (the rate
// is logged; BENCHMARKS.md has the figures). Every value carries its
// checksum and its key's counter: no reader may see a torn value, another
// key's value, a counter going backwards or one never written.
func TestViewReadersUnderLoad(t *testing.T) {
	cfg := testConfig(t)
	cfg.LogLevel = "info"
	cfg.SegmentSize = 64 << 20
	td := startDaemon(t, cfg)
	st := td.d.Store()
	const keys, size, batch, updates = 1000, 100, 500, 300_000
	// The messages are made before the clock starts: the rate is the
	// store's and the mirror's, not the test's.
	published := make([]uint64, keys)
	batches := make([][]record.Message, updates/batch)
	for b := range batches {
		batches[b] = make([]record.Message, batch)
		for j := range batch {
			i := (b*batch + j) % keys
			published[i]++
			batches[b][j] = record.Message{Topic: "load", Key: viewtest.Key(i), Tag: viewtest.Tag(published[i]), Value: viewtest.Value(i, published[i], size)}
		}
	}
	r, err := localview.Open(cfg.ViewPath())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	first := keys / batch // every key has a value before the readers start
	for _, b := range batches[:first] {
		if _, err := st.PublishBatch(b); err != nil {
			t.Fatal(err)
		}
	}
	waitView(t, r, "every key", func() bool {
		keys, err := r.Keys("load")
		return err == nil && len(keys) == 1000
	})
	readers := viewtest.StartReaders(t, 2, cfg.ViewPath(), "load", keys, false)

	start := time.Now()
	for _, b := range batches[first:] {
		if _, err := st.PublishBatch(b); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	n := updates - first*batch
	t.Logf("%d updates in %s: %.0f a second", n, took.Round(time.Millisecond), float64(n)/took.Seconds())

	waitView(t, r, "the last counters", func() bool {
		for i := range keys {
			v, tag, _, err := r.Get("load", viewtest.Key(i))
			if err != nil {
				return false
			}
			if c, err := viewtest.Check(i, v, []byte(tag)); err != nil || c != published[i] {
				return false
			}
		}
		return true
	})
	for i, c := range readers {
		viewtest.Verify(t, fmt.Sprintf("reader %d", i), c.Stop(t), published)
	}
}

// TestViewBatchesWhole: reader processes read a batch's 100 keys with the
// view file's GetMany, one read after another, while the daemon's store
// publishes atomic batches of them (record.Together: an HTTP NDJSON
// batch's, a Redis MSET's), each key at the batch's counter, with other
// publishes of new keys in between, which grow the file. No read sees
// a part of a batch or a mix of two.
func TestViewBatchesWhole(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentSize = 64 << 20
	td := startDaemon(t, cfg)
	st := td.d.Store()
	const keys, batches = 100, 1500
	msgs := make([]record.Message, keys)
	publish := func(c uint64) {
		for i := range msgs {
			msgs[i] = record.Message{Topic: "batch", Key: viewtest.Key(i), Tag: viewtest.Tag(c), Value: viewtest.Value(i, c, 16+int(c*7+uint64(i))%150)}
		}
		record.Together(msgs)
		if _, err := st.PublishBatch(msgs); err != nil {
			t.Fatal(err)
		}
		// New keys, enough for new generations (a PublishBatch that is
		// not atomic, a single publish).
		others := make([]record.Message, 10)
		for j := range others {
			others[j] = record.Message{Topic: "other", Key: fmt.Sprint(c, "-", j), Value: make([]byte, 200)}
		}
		if _, err := st.PublishBatch(others); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Publish(&record.Message{Topic: "other", Key: fmt.Sprint(c), Value: make([]byte, 200)}); err != nil {
			t.Fatal(err)
		}
	}
	publish(1)
	r, err := localview.Open(cfg.ViewPath())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitView(t, r, "the first batch", func() bool {
		_, _, _, err := r.Get("batch", viewtest.Key(keys-1))
		return err == nil
	})
	gen := r.Generation()
	readers := viewtest.StartBatchReaders(t, 2, cfg.ViewPath(), "batch", keys)
	for c := uint64(2); c <= batches; c++ {
		publish(c)
	}
	waitView(t, r, "the last batch", func() bool {
		v, tag, _, err := r.Get("batch", viewtest.Key(0))
		c, _ := viewtest.Check(0, v, []byte(tag))
		return err == nil && c == batches
	})
	if r.Generation() == gen {
		t.Errorf("the file stayed at generation %d: the test meant it to grow", gen)
	}
	published := make([]uint64, keys)
	for i := range published {
		published[i] = batches
	}
	for i, c := range readers {
		rep := c.Stop(t)
		viewtest.Verify(t, fmt.Sprintf("reader %d", i), rep, published)
		if rep.Batches < 2 {
			t.Errorf("reader %d saw %d batches: it read while nothing changed", i, rep.Batches)
		}
	}
}

// TestViewFileFull: the view outgrows a small tmpfs. The generation that
// does not fit is refused by fallocate (never a SIGBUS later), the view is
// turned off (readers: not ready, so they use the socket) and the daemon
// serves on, reads and writes. Once the tmpfs is larger, the mirror starts
// over by itself and the view has every key.
func TestViewFileFull(t *testing.T) {
	mnt, remount := testkit.Tmpfs(t, "3m")
	cfg := testConfig(t)
	hook(&cfg, func(h *daemonhooks.Hooks) { h.ViewRetry = 50 * time.Millisecond })
	cfg.ViewFile = filepath.Join(mnt, "view")
	cfg.ViewFileValues = true // the values the file holds come back to the heap before it goes
	td := startDaemon(t, cfg)
	r, err := localview.Open(cfg.ViewFile)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitView(t, r, "ready", func() bool { return r.Fresh(time.Second) == nil })
	value := func(i int) string { return fmt.Sprintf("%d:%s", i, strings.Repeat("x", 1000)) }
	n := 0
	for ; ; n++ {
		if r := td.do("PUT", fmt.Sprintf("/v1/topics/t/keys/k%d", n), strings.NewReader(value(n))); r.status != 200 {
			t.Fatalf("PUT %d: %d %s", n, r.status, r.body)
		}
		if _, _, _, err := r.Get("t", fmt.Sprintf("k%d", n)); errors.Is(err, localview.ErrNotReady) {
			break
		}
		if n > 10000 {
			t.Fatal("the view never outgrew a 3 MiB tmpfs")
		}
	}
	// The store's view kept the values the file held in the file only
	// (store/view/file.go): they came back to its heap before the file
	// went.
	for i := range n + 1 {
		if e, ok := td.d.Store().Get("t", fmt.Sprintf("k%d", i)); !ok || string(e.Value) != value(i) {
			t.Fatalf("the store's k%d after the view was turned off: %v %.20q", i, ok, e.Value)
		}
	}
	if err := r.Fresh(time.Minute); !errors.Is(err, localview.ErrNotReady) {
		t.Errorf("fresh after the view was turned off: %v", err)
	}
	if r := td.do("PUT", "/v1/topics/t/keys/after", strings.NewReader("1")); r.status != 200 {
		t.Errorf("PUT after the view was turned off: %d %s", r.status, r.body)
	}
	if r := td.do("GET", "/v1/topics/t/keys/after", nil); r.status != 200 || string(r.body) != "1" {
		t.Errorf("GET after the view was turned off: %d %s", r.status, r.body)
	}
	remount("64m")
	if msg := testkit.Poll(t, 10*time.Second, func() string {
		v, _, _, err := r.Get("t", "after")
		if err == nil && string(v) != "1" {
			err = fmt.Errorf("value %q", v)
		}
		if err == nil {
			err = r.Fresh(time.Second)
		}
		if err != nil {
			return err.Error()
		}
		return ""
	}); msg != "" {
		t.Fatalf("the view is not back with every key: %s", msg)
	}
	keys, err := r.Keys("t")
	if err != nil || len(keys) != len(td.d.Store().Keys("t", "", "", 0)) {
		t.Errorf("the view holds %d keys, the store %d: %v", len(keys), len(td.d.Store().Keys("t", "", "", 0)), err)
	}
}

// TestViewValuesAcrossGrowth: with --view-file-values, the store's view
// keeps the values the mirror wrote in the shared view file only
// (store/view/file.go). Reads
// of the store, made while publishes of new keys grow the file into new
// generations (the old one unmapped) and rewrite old keys' records in
// place, each get a value written for their key; every key holds its
// last value at the end, and after the values came back to the heap.
func TestViewValuesAcrossGrowth(t *testing.T) {
	cfg := testConfig(t)
	cfg.ViewFileValues = true
	td := startDaemon(t, cfg)
	st := td.d.Store()
	r, err := localview.Open(cfg.ViewPath())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitView(t, r, "ready", func() bool { return r.Fresh(time.Second) == nil })
	gen := r.Generation()
	const keys, batch = 40_000, 500
	value := func(i, round int) []byte { return fmt.Appendf(nil, "k%05d/%d/%s", i, round, strings.Repeat("v", 90)) }
	publish := func(from, to, round int) {
		msgs := make([]record.Message, 0, batch)
		for i := from; i < to; i++ {
			msgs = append(msgs, record.Message{Topic: "t", Key: fmt.Sprintf("k%05d", i), Value: value(i, round)})
			if len(msgs) == batch || i == to-1 {
				if _, err := st.PublishBatch(msgs); err != nil {
					t.Fatal(err)
				}
				msgs = msgs[:0]
			}
		}
	}
	publish(0, batch, 0)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		defer close(done)
		for i := 0; ; i = (i + 7919) % batch {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("k%05d", i)
			if e, ok := st.Get("t", k); !ok || !strings.HasPrefix(string(e.Value), k+"/") {
				done <- fmt.Errorf("Get(%s) = %v %q", k, ok, e.Value)
				return
			}
		}
	}()
	last := 0 // the read keys' round
	for from := batch; from < keys; from += 4 * batch {
		publish(from, min(from+4*batch, keys), 1) // new keys: the file grows
		publish(0, batch, from)                   // the read keys, in place
		last = from
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitView(t, r, "every key", func() bool { ks, err := r.Keys("t"); return err == nil && len(ks) == keys })
	if r.Generation() == gen {
		t.Fatal("the view file never grew: the test meant reads across a new generation")
	}
	check := func(when string) {
		for i := range keys {
			round := 1
			if i < batch {
				round = last
			}
			k := fmt.Sprintf("k%05d", i)
			if e, ok := st.Get("t", k); !ok || string(e.Value) != string(value(i, round)) {
				t.Fatalf("%s: Get(%s) = %v %q", when, k, ok, e.Value)
			}
		}
	}
	check("with the file")
	st.UnfileView() // what the mirror does before it lets the file go
	check("with the values back on the heap")
}

// TestViewValuesAfterRestart: with --view-file-values, the values a
// restart loads (snapshot and replay) go into the shared view file once
// the mirror has loaded it, as those written later do: every key keeps
// its value in the file only, and reads give it.
func TestViewValuesAfterRestart(t *testing.T) {
	cfg := testConfig(t)
	cfg.ViewFileValues = true
	td := startDaemon(t, cfg)
	const keys = 5000 // more than one of the mirror's chunks (loadedChunk)
	value := func(i int) string { return fmt.Sprintf("v%04d/%s", i, strings.Repeat("v", 90)) }
	msgs := make([]record.Message, 0, keys)
	for i := range keys {
		msgs = append(msgs, record.Message{Topic: "t", Key: fmt.Sprintf("k%04d", i), Value: []byte(value(i))})
	}
	if _, err := td.d.Store().PublishBatch(msgs); err != nil {
		t.Fatal(err)
	}
	td.stop()
	td = startDaemon(t, cfg)
	r, err := localview.Open(cfg.ViewPath())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitView(t, r, "ready", func() bool { return r.Fresh(time.Second) == nil })
	st := td.d.Store()
	if n := st.ViewValuesInFile(); n != keys {
		t.Errorf("%d of %d values in the file only after the restart", n, keys)
	}
	for i := range keys {
		k := fmt.Sprintf("k%04d", i)
		if e, ok := st.Get("t", k); !ok || string(e.Value) != value(i) {
			t.Fatalf("Get(%s) = %v %q", k, ok, e.Value)
		}
	}
}

// TestViewMetrics: the view's gauges on /metrics.
func TestViewMetrics(t *testing.T) {
	cfg := testConfig(t)
	cfg.MetricsAddr = "127.0.0.1:0"
	td := startDaemon(t, cfg)
	td.put("t", "a", "1")
	td.put("t", "b", "2")
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	var text string
	testkit.Eventually(t, 10*time.Second, "the view's gauges", func() bool {
		res, err := c.Get("http://" + td.d.MetricsAddr() + "/metrics")
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		text = string(body)
		return strings.Contains(text, "\ncachecast_view_keys 2\n")
	})
	for _, want := range []string{"cachecast_view_ready 1", "cachecast_view_generation 1", "cachecast_view_queued 0", "cachecast_view_bytes "} {
		if !strings.Contains(text, "\n"+want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestViewFileUnlinked: the view file deleted under a running daemon is
// put back within a heartbeat or two (a new generation; readers of the
// deleted one follow it); its whole directory deleted turns the view off
// (its readers: not ready) until the directory is back, when the mirror
// starts over by itself.
func TestViewFileUnlinked(t *testing.T) {
	cfg := testConfig(t)
	hook(&cfg, func(h *daemonhooks.Hooks) { h.ViewRetry = 50 * time.Millisecond })
	run := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.ViewFile = filepath.Join(run, "view")
	td := startDaemon(t, cfg)
	r, err := localview.Open(cfg.ViewFile)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitView(t, r, "ready", func() bool { return r.Fresh(time.Second) == nil })
	td.put("prices", "a", "1")
	waitView(t, r, "a", func() bool { v, _, _, err := r.Get("prices", "a"); return err == nil && string(v) == "1" })

	gen := r.Generation()
	if err := os.Remove(cfg.ViewFile); err != nil {
		t.Fatal(err)
	}
	waitView(t, r, "a new file at the path", func() bool {
		_, err := os.Stat(cfg.ViewFile)
		return err == nil
	})
	td.put("prices", "a", "2")
	waitView(t, r, "a's new value", func() bool { v, _, _, err := r.Get("prices", "a"); return err == nil && string(v) == "2" })
	if r.Generation() <= gen {
		t.Fatalf("generation %d, was %d", r.Generation(), gen)
	}
	if r2, err := localview.Open(cfg.ViewFile); err != nil {
		t.Fatal(err)
	} else if v, _, _, err := r2.Get("prices", "a"); err != nil || string(v) != "2" {
		t.Fatalf("a reader of the new file: %q %v", v, err)
	} else {
		r2.Close()
	}

	if err := os.RemoveAll(run); err != nil {
		t.Fatal(err)
	}
	waitView(t, r, "not ready", func() bool {
		_, _, _, err := r.Get("prices", "a")
		return errors.Is(err, localview.ErrNotReady)
	})
	td.put("prices", "a", "3") // the daemon serves on
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	var r3 *localview.Reader
	waitView(t, r, "a view again", func() bool {
		if r3 == nil {
			r3, _ = localview.Open(cfg.ViewFile)
			return false
		}
		v, _, _, err := r3.Get("prices", "a")
		return err == nil && string(v) == "3"
	})
	r3.Close()
}
