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
// size (a new log, or one with nothing written, too), and refused when
// asked for in segments of another size (its records say which) or when
// its first record carries no mark.
func TestFindLog(t *testing.T) {
	const seg = 64 << 10
	written := func(t *testing.T, records int) string {
		dir := t.TempDir()
		m, _, err := OpenMeta(filepath.Join(dir, "meta"), seg, 4, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := Open(filepath.Join(dir, "log"), m, 4, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		for i := range records {
			if _, err := write(l, i, 10<<10); err != nil {
				t.Fatal(err)
			}
			l.Commit()
		}
		if records > 0 && l.WritePos() < seg {
			t.Fatalf("%d records end at %d, in the first segment", records, l.WritePos())
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		m.Close()
		return filepath.Join(dir, "log")
	}
	unmarked := func(t *testing.T, records int) string {
		dir := written(t, records)
		f, err := os.OpenFile(filepath.Join(dir, segmentName(0)), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{0x40, 0, 0, 0, 0, 0, 0, 0}, 0); err != nil { // a size where the mark was
			t.Fatal(err)
		}
		return dir
	}
	tests := []struct {
		name    string
		dir     func(*testing.T, int) string
		records int
		segSize int64
		found   bool
		err     string
	}{
		{"two segments", written, 12, seg, true, ""},
		{"nothing written", written, 0, seg, true, ""},
		{"no log", func(t *testing.T, _ int) string { return filepath.Join(t.TempDir(), "log") }, 0, seg, false, ""},
		{"asked in larger segments", written, 12, 2 * seg, false, "written in segments of 65536 bytes"},
		{"asked in smaller segments", written, 12, seg / 2, false, "written in larger segments"},
		{"asked in segments the files do not divide into", written, 12, 3 * seg, false, "not a whole number of segments"},
		{"no mark", unmarked, 12, seg, false, "before marks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok, err := FindLog(tt.dir(t, tt.records), tt.segSize)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("FindLog: %v; want an error saying %q", err, tt.err)
				}
				return
			}
			if err != nil || ok != tt.found {
				t.Fatalf("FindLog: %+v, %v, %v; want found %v", f, ok, err, tt.found)
			}
			if ok && (f != Found{Slots: 4, Oldest: 0}) {
				t.Fatalf("FindLog: %+v; want 4 segments a file from 0", f)
			}
		})
	}
}
