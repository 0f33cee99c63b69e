package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// faultSink keeps the compiler from dropping a read the test needs.
var faultSink byte

// truncateUnderMap truncates s's segment file at path to nothing, so that
// its mapped pages fault. The preparer allocates the next segments in the
// same file: once it has, nothing extends the file again under the
// truncation (a read past its end is the fault; a hole would read zeros).
func truncateUnderMap(t *testing.T, s *Store, path string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "the next segments prepared", s.seglog.Prepared)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
}

// TestGuardFault: a real fault on a mapped page (the file truncated under
// the map, so the page has nothing behind it: SIGBUS) comes back from each
// guarded path as ErrIO saying what was being done; the process goes on.
func TestGuardFault(t *testing.T) {
	s := openTest(t, testOptions(t, t.TempDir()))
	res, err := s.Publish(&record.Message{Topic: "t", Key: "k", Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	path := s.seglog.SegmentPath(res.Pos)
	// A map of our own over the same file, for the bare guard.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	data, err := fsys.Map(f, fsys.PageSize)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Unmap(data)
	truncateUnderMap(t, s, path)

	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"read of the log", func() error {
			_, err := s.seglog.Read(res.Pos, func(record.Record) error { return nil })
			return err
		}, "fault reading " + path + " at 0x"},
		{"write of the log", func() error {
			_, err := s.Publish(&record.Message{Topic: "t", Key: "k2", Value: []byte("v")})
			return err
		}, "fault writing the log at 0x"},
		{"any mapped page", func() error {
			return fsys.Guard(func() error { faultSink = data[0]; return nil })
		}, "fault on a mapped page at 0x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if !errors.Is(err, ErrIO) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want ErrIO saying %q", err, tt.want)
			}
		})
	}
	if err := s.Healthy(); err == nil {
		t.Fatal("Healthy() = nil after a write fault")
	}

	// A panic that is not a fault is not swallowed.
	defer func() {
		if r := recover(); r != "boom" {
			t.Fatalf("recovered %v, want the panic to go through", r)
		}
	}()
	_ = fsys.Guard(func() error { panic("boom") })
}

// TestCreateFileAtomic: the file is there whole, with the store's mode, or
// not at all; no temporary file is left either way.
func TestCreateFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := fsys.CreateAtomic(path, fsys.WriteSynced([]byte("one"))); err != nil {
		t.Fatal(err)
	}
	failing := errors.New("fill failed")
	err := fsys.CreateAtomic(path, func(f *os.File) error {
		f.Write([]byte("half of two"))
		return failing
	})
	if !errors.Is(err, failing) {
		t.Fatalf("err = %v, want the fill's error", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "one" {
		t.Fatalf("after a failed replace: %q, %v; want the old file", b, err)
	}
	if err := fsys.CreateAtomic(path, fsys.WriteSynced([]byte("two"))); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two" {
		t.Fatalf("after a replace: %q", b)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, %v; want 0640", fi.Mode(), err)
	}
	if des, _ := os.ReadDir(dir); len(des) != 1 {
		t.Fatalf("directory holds %d files, want only f", len(des))
	}
	if err := fsys.CreateAtomic(filepath.Join(dir, "no", "dir", "f"), fsys.WriteSynced(nil)); !errors.Is(err, ErrIO) {
		t.Fatalf("in a missing directory: %v, want ErrIO", err)
	}
}

// TestViewOrUndoFailureMarksUnhealthy: a committed record the view cannot
// take (a fault reading it back) and a failed write that cannot be taken
// back (a fault zeroing its bytes) leave the log, its indexes and the view
// disagreeing: each is counted and makes the store unhealthy, not only
// logged. The fault is real: the segment file truncated under its map.
func TestViewOrUndoFailureMarksUnhealthy(t *testing.T) {
	tests := []struct {
		name  string
		fail  func(s *Store, pos int64)
		count func(Stats) uint64
	}{
		{"apply to the view", func(s *Store, pos int64) { s.applyAt(pos) }, func(st Stats) uint64 { return st.ApplyFailures }},
		{"undo of a write", func(s *Store, pos int64) {
			s.wmu.Lock()
			defer s.wmu.Unlock()
			s.undo(pos)
		}, func(st Stats) uint64 { return st.UndoFailures }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openTest(t, testOptions(t, t.TempDir()))
			res, err := s.Publish(&record.Message{Topic: "t", Key: "k", Value: []byte("v")})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Healthy(); err != nil {
				t.Fatal(err)
			}
			path := s.seglog.SegmentPath(res.Pos)
			truncateUnderMap(t, s, path)
			tt.fail(s, res.Pos)
			err = s.Healthy()
			if err == nil || !strings.Contains(err.Error(), "no longer matches the log") {
				t.Fatalf("Healthy() = %v after the failure, want it to say the store no longer matches its log", err)
			}
			if got := tt.count(s.Stats()); got != 1 {
				t.Fatalf("counted %d failures, want 1", got)
			}
		})
	}
}

// TestPanicReleasesTheWriteLock: a panic under the write lock (here a
// view follower's, which publish runs under it) reaches the caller and
// leaves the lock free: the next publish and AppendRecord go through
// instead of hanging.
func TestPanicReleasesTheWriteLock(t *testing.T) {
	// Closed at the end, not by a cleanup: Close takes the write lock, and
	// a test that found it held must fail, not hang.
	s, err := Open(testOptions(t, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	s.FollowView(func(c view.Change) {
		if strings.HasPrefix(c.Key, "boom") {
			panic("a follower's bug")
		}
	}, nil)
	publish := func(key string) func() error {
		return func() error {
			_, err := s.Publish(&record.Message{Topic: "t", Key: key, Value: []byte("v")})
			return err
		}
	}
	appendRecord := func(seq uint64, key string) func() error {
		return func() error {
			_, err := s.AppendRecord(peerRecord(0xbeef, seq, time.Now(), key))
			return err
		}
	}
	lockStep(t, "the publish that panics", true, publish("boom"))
	lockStep(t, "a publish after it", false, publish("k"))
	// A key of its own: on "boom", a peer's record stamped in the same
	// millisecond as the publish above may lose to it (the greater origin
	// wins a tie), change nothing, and call no follower.
	lockStep(t, "the append that panics", true, appendRecord(1, "boom-peer"))
	lockStep(t, "an append after it", false, appendRecord(2, "k"))
	s.FollowView(nil, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBootstrapPanicReleasesTheWriteLock: a panic in Bootstrap's step
// under the write lock (here the logger's, a hook that panics on the
// warning a snapshot with stamps ahead of the clock guard brings) reaches
// the caller and leaves the lock free: a publish, an append and a
// bootstrap after it go through instead of hanging.
func TestBootstrapPanicReleasesTheWriteLock(t *testing.T) {
	o := testOptions(t, t.TempDir())
	o.MaxClockOffset = 500 * time.Millisecond
	o.Logger = zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.DebugLevel), zap.Hooks(func(e zapcore.Entry) error {
		if strings.Contains(e.Message, "ahead of the local clock") {
			panic("a logger's bug")
		}
		return nil
	}))
	// Closed at the end, not by a cleanup: Close takes the write lock, and
	// a test that found it held must fail, not hang.
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	snapshot := func(at time.Time) []byte {
		src := view.New()
		src.Apply(peerRecord(0xbeef, 5, at, "k"))
		var b bytes.Buffer
		if err := view.EncodeSnapshot(&b, src, 0, map[uint64]uint64{0xbeef: 5}); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	ahead, now := snapshot(time.Now().Add(time.Hour)), snapshot(time.Now())
	lockStep(t, "the bootstrap that panics", true, func() error {
		_, err := s.Bootstrap(bytes.NewReader(ahead))
		return err
	})
	lockStep(t, "a publish after it", false, func() error {
		_, err := s.Publish(&record.Message{Topic: "t", Key: "k2", Value: []byte("v")})
		return err
	})
	lockStep(t, "a bootstrap after it", false, func() error {
		moved, err := s.Bootstrap(bytes.NewReader(now))
		if err == nil && moved[0xbeef] != 5 {
			err = fmt.Errorf("moved %v, want origin beef on to 5", moved)
		}
		return err
	})
	lockStep(t, "an append after it", false, func() error {
		_, err := s.AppendRecord(peerRecord(0xbeef, 6, time.Now(), "k"))
		return err
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// lockStep runs fn, which must panic or not as told, within 10 s: a
// write that waits for a lock left held never returns.
func lockStep(t *testing.T, what string, wantPanic bool, fn func() error) {
	t.Helper()
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		if err := fn(); err != nil {
			panic(err)
		}
	}()
	select {
	case p := <-done:
		if (p != nil) != wantPanic {
			t.Fatalf("%s: panic %v, want one: %v", what, p, wantPanic)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still waiting for the write lock after 10s", what)
	}
}
