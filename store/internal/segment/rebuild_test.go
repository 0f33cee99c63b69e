package segment

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestFindLog reads a log's segment files as a store whose metafile was
// lost does: a log of 64 KiB segments, four a file, is found with that
// size (a new log, one with nothing written, and one whose writer left
// its first segment before its next record was written, too), and
// refused when asked for in segments of another size (its records say
// which, in its first file or at the next file's start) or when its first
// record carries no mark.
func TestFindLog(t *testing.T) {
	const seg = 64 << 10
	log := func(t *testing.T, slots int64, sizes ...int) string {
		dir := t.TempDir()
		m, _, err := OpenMeta(filepath.Join(dir, "meta"), seg, slots, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := Open(filepath.Join(dir, "log"), m, 4, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		for i, size := range sizes {
			if _, err := write(l, i, size); err != nil {
				t.Fatal(err)
			}
			l.Commit()
		}
		if len(sizes) > 0 && l.WritePos() < seg {
			t.Fatalf("%d records end at %d, in the first segment", len(sizes), l.WritePos())
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		m.Close()
		return filepath.Join(dir, "log")
	}
	overwritten := func(dir string, at int64, b []byte) string {
		f, err := os.OpenFile(filepath.Join(dir, segmentName(0)), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(b, at); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	twelve := []int{10 << 10, 10 << 10, 10 << 10, 10 << 10, 10 << 10, 10 << 10, 10 << 10, 10 << 10, 10 << 10, 10 << 10, 10 << 10, 10 << 10}
	tests := []struct {
		name    string
		dir     func(*testing.T) string
		segSize int64
		found   Found // Slots 0: not found
		err     string
	}{
		{"two segments", func(t *testing.T) string { return log(t, 4, twelve...) }, seg, Found{Slots: 4}, ""},
		{"nothing written", func(t *testing.T) string { return log(t, 4) }, seg, Found{Slots: 4}, ""},
		{"no log", func(t *testing.T) string { return filepath.Join(t.TempDir(), "log") }, seg, Found{}, ""},
		{"the next segment's record lost", func(t *testing.T) string {
			return overwritten(log(t, 4, twelve...), seg, make([]byte, 8)) // its prefix zeroed
		}, seg, Found{Slots: 4}, ""},
		{"asked in larger segments", func(t *testing.T) string { return log(t, 4, twelve...) }, 2 * seg, Found{}, "written in segments of 65536 bytes"},
		{"asked in smaller segments", func(t *testing.T) string { return log(t, 4, twelve...) }, seg / 2, Found{}, "written in larger segments"},
		{"asked in smaller segments, the next in the next file", func(t *testing.T) string {
			return log(t, 1, 10<<10, 60<<10) // the second does not fit in the first segment
		}, seg / 2, Found{}, "the next file's first: the log was written in segments of 65536 bytes"},
		{"asked in segments the files do not divide into", func(t *testing.T) string { return log(t, 4, twelve...) }, 3 * seg, Found{}, "not a whole number of segments"},
		{"no mark", func(t *testing.T) string {
			return overwritten(log(t, 4, twelve...), 0, []byte{0x40, 0, 0, 0, 0, 0, 0, 0}) // a size where the mark was
		}, seg, Found{}, "before marks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok, err := FindLog(tt.dir(t), tt.segSize)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("FindLog: %v; want an error saying %q", err, tt.err)
				}
				return
			}
			if err != nil || ok != (tt.found.Slots > 0) || f != tt.found {
				t.Fatalf("FindLog: %+v, %v, %v; want %+v", f, ok, err, tt.found)
			}
		})
	}
}
