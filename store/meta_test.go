package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/internal/segment"
)

// metaCopies reads the metafile at path and says which copy is current
// (the valid one with the higher generation; -1 when neither is valid).
func metaCopies(t *testing.T, path string) (b []byte, cur int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cur = -1
	var gen uint64
	for k := 0; k < 2; k++ {
		c := b[k*segment.MetaCopySize : (k+1)*segment.MetaCopySize]
		if g := binary.LittleEndian.Uint64(c[segment.OffGen:]); segment.MetaCopyValid(c) && (cur < 0 || g > gen) {
			cur, gen = k, g
		}
	}
	return b, cur
}

// closedStore makes a store with records, closed cleanly (the metafile
// synced many times), and returns its options and origin.
func closedStore(t *testing.T) (Options, uint64) {
	t.Helper()
	return closedStoreSlots(t, 0)
}

// closedStoreSlots is closedStore with slots segments a segment file (0:
// the store's choice).
func closedStoreSlots(t *testing.T, slots int64) (Options, uint64) {
	t.Helper()
	o := testOptions(t, t.TempDir())
	o.segmentsPerFile = slots
	s := openTest(t, o)
	writeRecords(t, s, 50, 100)
	origin := s.Origin()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return o, origin
}

// TestMetaDamagedCopy: a torn (half-written) or corrupt (bytes flipped)
// copy of the metafile is ignored; the store opens from the other copy
// with its origin and every record.
func TestMetaDamagedCopy(t *testing.T) {
	tests := []struct {
		name   string
		damage func(c []byte) // one copy
	}{
		{"torn: the second half not written", func(c []byte) { clear(c[segment.MetaCopySize/2:]) }},
		{"torn: the first half not written", func(c []byte) { clear(c[:segment.MetaCopySize/2]) }},
		{"corrupt: bytes flipped", func(c []byte) { c[segment.OffWriting] ^= 0x5a; c[segment.OffOrigin+3] ^= 0x01 }},
	}
	for _, tt := range tests {
		for _, which := range []string{"current", "other"} {
			t.Run(tt.name+", "+which+" copy", func(t *testing.T) {
				o, origin := closedStore(t)
				path := filepath.Join(o.Dir, metaName)
				b, cur := metaCopies(t, path)
				if cur < 0 {
					t.Fatal("no valid copy after a clean close")
				}
				k := cur
				if which == "other" {
					k = 1 - cur
				}
				tt.damage(b[k*segment.MetaCopySize : (k+1)*segment.MetaCopySize])
				if err := os.WriteFile(path, b, 0o640); err != nil {
					t.Fatal(err)
				}
				s := openTest(t, o)
				if s.Origin() != origin {
					t.Fatalf("origin %x after a damaged copy, want %x", s.Origin(), origin)
				}
				for i := 0; i < 50; i++ {
					if _, ok := s.Get("t", fmt.Sprint(i)); !ok {
						t.Fatalf("key %d missing", i)
					}
				}
				if got := len(readAll(t, s)); got != 50 {
					t.Fatalf("%d records after reopening, want 50", got)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				// The damaged copy was rewritten: both are valid again.
				b, _ = metaCopies(t, path)
				for k := 0; k < 2; k++ {
					if !segment.MetaCopyValid(b[k*segment.MetaCopySize : (k+1)*segment.MetaCopySize]) {
						t.Fatalf("copy %d still invalid after a reopen and a close", k)
					}
				}
			})
		}
	}
}

// TestMetaBothCopiesBad: with neither copy valid the store refuses to
// open with ErrCorrupt naming the metafile.
func TestMetaBothCopiesBad(t *testing.T) {
	o, _ := closedStore(t)
	path := filepath.Join(o.Dir, metaName)
	b, _ := metaCopies(t, path)
	b[segment.OffCommitted] ^= 0xff
	b[segment.MetaCopySize+segment.OffCommitted] ^= 0xff
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
	s, err := Open(o)
	if err == nil {
		s.Close()
		t.Fatal("opened a store whose metafile has no valid copy")
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "both copies") {
		t.Fatalf("err = %v; want ErrCorrupt naming %s and both copies", err, path)
	}
}

// TestMetaSingleCopyUpgrade: a metafile of the old single-copy layout
// (version 1, no CRC, nothing in copy B) opens unchanged and is upgraded
// by the next write, which goes to copy B.
func TestMetaSingleCopyUpgrade(t *testing.T) {
	o, origin := closedStore(t)
	writeLegacyLog(t, o, origin, 50, 100) // the log such a metafile goes with
	path := filepath.Join(o.Dir, metaName)
	b, cur := metaCopies(t, path)
	old := make([]byte, segment.MetaSize)
	copy(old[:segment.OffGen], b[cur*segment.MetaCopySize:]) // the old layout ends at the boot ID
	binary.LittleEndian.PutUint64(old[segment.OffVersion:], segment.MetaVersionSingle)
	// Positions that fit the legacy log: nothing flushed, indexed or
	// snapshotted yet, so that the store rebuilds all from its records.
	for _, off := range []int{segment.OffCommitted, segment.OffWatermark} {
		clear(old[off : off+16])
	}
	clear(old[segment.OffIndexed : segment.OffIndexed+8])
	for _, p := range []string{filepath.Join(o.Dir, snapshotName), filepath.Join(o.Dir, indexDirName)} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, old, 0o640); err != nil {
		t.Fatal(err)
	}
	// The first write goes to copy B; the old copy A stays as it was
	// until the next one.
	m, fresh, err := segment.OpenMeta(path, o.SegmentSize, 1, 0, nil)
	if err != nil || fresh {
		t.Fatalf("opening the old metafile: fresh %v, %v", fresh, err)
	}
	if m.Get(segment.OffOrigin) != origin {
		t.Fatalf("origin %x from the old metafile, want %x", m.Get(segment.OffOrigin), origin)
	}
	err = m.Sync()
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, cur = metaCopies(t, path)
	if cur != 1 || binary.LittleEndian.Uint64(b[segment.OffVersion:]) != segment.MetaVersionSingle || !bytes.Equal(b[:segment.OffGen], old[:segment.OffGen]) {
		t.Fatalf("after the first write: current copy %d, copy A version %d; want B, and A untouched",
			cur, binary.LittleEndian.Uint64(b[segment.OffVersion:]))
	}

	// The store opens from the old file just the same.
	if err := os.WriteFile(path, old, 0o640); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, o)
	if s.Origin() != origin {
		t.Fatalf("origin %x from the old metafile, want %x", s.Origin(), origin)
	}
	if got := len(readAll(t, s)); got != 50 {
		t.Fatalf("%d records, want 50", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ = metaCopies(t, path)
	for k := 0; k < 2; k++ {
		if !segment.MetaCopyValid(b[k*segment.MetaCopySize : (k+1)*segment.MetaCopySize]) {
			t.Fatalf("copy %d not upgraded after a close", k)
		}
	}
	s = openTest(t, o)
	if s.Origin() != origin {
		t.Fatalf("origin %x after the upgrade, want %x", s.Origin(), origin)
	}
}

// TestMetaWriteFault: a fault under the metafile's map (the file truncated
// under it) comes back from a sync as ErrIO naming the file.
func TestMetaWriteFault(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, metaName)
	m, _, err := segment.OpenMeta(path, 64<<10, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	m.Put(segment.OffLastHLC, 7)
	err = m.Sync()
	if !errors.Is(err, ErrIO) || !strings.Contains(err.Error(), "fault writing "+path) {
		t.Fatalf("err = %v; want ErrIO saying fault writing %s", err, path)
	}
}

// setMetaVersion rewrites copy k of the metafile bytes b with version v
// and a CRC that matches, as a build writing version v would leave it.
func setMetaVersion(b []byte, k int, v uint64) {
	c := b[k*segment.MetaCopySize : (k+1)*segment.MetaCopySize]
	binary.LittleEndian.PutUint64(c[segment.OffVersion:], v)
	binary.LittleEndian.PutUint32(c[segment.MetaCopySize-4:], crc32.Checksum(c[:segment.MetaCopySize-4], fsys.Castagnoli))
}

// TestMetaFormatVersions: the metafile's version is the directory's
// format. Version 2 (framed entries, written before the version said so)
// opens with every record and is written back as 3, which builds that know
// only 2 refuse; a directory of one segment a file stays 3, one of several
// segments a file (version 4) stays 4. A valid copy of a newer version,
// current or not, is ErrNewerFormat naming the file and the versions, and
// nothing in the directory changes: no record is taken for damage and set
// aside.
func TestMetaFormatVersions(t *testing.T) {
	tests := []struct {
		name    string
		slots   int64     // segments a file the directory is made with
		version [2]uint64 // of copies A and B
		newer   bool
		want    uint64 // the version after a close
	}{
		{"both copies version 2", 1, [2]uint64{2, 2}, false, 3},
		{"one copy 2, one 3", 1, [2]uint64{2, 3}, false, 3},
		{"version 3", 1, [2]uint64{3, 3}, false, 3},
		{"version 4, several segments a file", 16, [2]uint64{4, 4}, false, 4},
		{"the current copy newer", 1, [2]uint64{3, 5}, true, 0},
		{"the other copy newer", 16, [2]uint64{5, 4}, true, 0},
		{"far newer", 1, [2]uint64{1 << 40, 1 << 40}, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, origin := closedStoreSlots(t, tt.slots)
			path := filepath.Join(o.Dir, metaName)
			b, _ := metaCopies(t, path)
			for k, v := range tt.version {
				setMetaVersion(b, k, v)
			}
			if err := os.WriteFile(path, b, 0o640); err != nil {
				t.Fatal(err)
			}
			before := dirSnapshot(t, o.Dir)
			s, err := Open(o)
			if tt.newer {
				if err == nil {
					s.Close()
					t.Fatal("opened a directory of a newer format")
				}
				if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "up to 4") {
					t.Fatalf("err = %v; want ErrNewerFormat naming %s and the version read", err, path)
				}
				if after := dirSnapshot(t, o.Dir); after != before {
					t.Fatalf("the refused open changed the directory:\nbefore %s\nafter  %s", before, after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Origin() != origin {
				t.Fatalf("origin %x, want %x", s.Origin(), origin)
			}
			if got := len(readAll(t, s)); got != 50 {
				t.Fatalf("%d records, want 50", got)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			b, cur := metaCopies(t, path)
			if v := binary.LittleEndian.Uint64(b[cur*segment.MetaCopySize+segment.OffVersion:]); v != tt.want {
				t.Fatalf("the current copy has version %d after a close, want %d", v, tt.want)
			}
		})
	}
}

// dirSnapshot lists every file under dir with its size and a checksum of
// its bytes, one line each, so that two listings compare equal only when
// nothing was added, removed or written.
func dirSnapshot(t *testing.T, dir string) string {
	t.Helper()
	var sb strings.Builder
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(&sb, "%s %d %08x; ", strings.TrimPrefix(p, dir), len(b), crc32.ChecksumIEEE(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb.String()
}
