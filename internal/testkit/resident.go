package testkit

import (
	"bufio"
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Resident counts the pages of b (part of a map) mapped in this process
// now (/proc/self/pagemap's present bit): the process's resident set, not
// the page cache (mincore's), which keeps a page the process dropped.
func Resident(tb testing.TB, b []byte) int {
	tb.Helper()
	if len(b) == 0 {
		return 0
	}
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		tb.Fatalf("pagemap: %v", err)
	}
	defer f.Close()
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	first, last := start/page, (start+uintptr(len(b))-1)/page
	entries := make([]byte, 8*(last-first+1))
	if _, err := f.ReadAt(entries, int64(first*8)); err != nil {
		tb.Fatalf("pagemap: %v", err)
	}
	n := 0
	for i := 0; i < len(entries); i += 8 {
		if binary.LittleEndian.Uint64(entries[i:])&(1<<63) != 0 {
			n++
		}
	}
	return n
}

// ResidentUnder is the bytes of this process's resident set mapped from
// the files under dir (/proc/self/smaps' Rss of their maps).
func ResidentUnder(tb testing.TB, dir string) int64 {
	tb.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		tb.Fatalf("smaps: %v", err)
	}
	defer f.Close()
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var total int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 0:
		case strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			// A map's first line: range, perms, offset, dev, inode, path.
			in = len(fields) >= 6 && strings.HasPrefix(fields[5], prefix)
		case in && fields[0] == "Rss:" && len(fields) >= 2:
			kib, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				tb.Fatalf("smaps: %q: %v", sc.Text(), err)
			}
			total += kib << 10
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatalf("smaps: %v", err)
	}
	return total
}

// DirtyPages reports how many pages of [off, off+n) of f are dirty in the
// page cache (cachestat); ok is false where that cannot be told: a
// tmpfs, which keeps its pages dirty, or a kernel before Linux 6.5.
func DirtyPages(tb testing.TB, f *os.File, off, n int64) (dirty uint64, ok bool) {
	tb.Helper()
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil {
		tb.Fatal(err)
	}
	if fs.Type == unix.TMPFS_MAGIC {
		return 0, false
	}
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{Off: uint64(off), Len: uint64(n)}, &st, 0); err != nil {
		tb.Logf("cachestat: %v", err)
		return 0, false
	}
	return st.Dirty, true
}
