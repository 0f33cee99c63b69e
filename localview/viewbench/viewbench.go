// Package viewbench is for the shared view's benchmarks (package
// localview and the daemon's): the directories to put a view file in
// (a huge-page tmpfs among them, when the environment names one) and how
// much of a mapping huge pages back. It does not import localview, so
// that localview's own tests can use it.
package viewbench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Dir is a directory the view benchmarks put their view files in.
type Dir struct {
	// Name is the sub-benchmark's "fs=" name: temp (the default temporary
	// directory: what the benchmarks always used), tmpfs or huge.
	Name string
	// Path is the directory; "" is the default temporary directory.
	Path string
}

// Environment naming the file systems the view benchmarks also run on.
// Mounting one needs root, so the benchmarks never do it themselves:
//
//	mkdir -p /tmp/cc-huge && mount -t tmpfs -o huge=within_size,size=4g cc-huge /tmp/cc-huge
//	CACHECAST_HUGE_TMPFS=/tmp/cc-huge CACHECAST_TMPFS=/dev/shm go test -bench ...
const (
	EnvTmpfs     = "CACHECAST_TMPFS"      // a tmpfs without huge pages (/dev/shm)
	EnvHugeTmpfs = "CACHECAST_HUGE_TMPFS" // a tmpfs mounted huge=within_size or always
)

// BenchDirs are the directories to run a view benchmark over: the default
// temporary directory, then those the environment names (EnvTmpfs,
// EnvHugeTmpfs).
func BenchDirs() []Dir {
	dirs := []Dir{{Name: "temp"}}
	for _, d := range []Dir{{"tmpfs", os.Getenv(EnvTmpfs)}, {"huge", os.Getenv(EnvHugeTmpfs)}} {
		if d.Path != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// ReportHugeShare adds "pmd-%" to b's results: the share of the resident
// bytes of this process's mappings of the file at path (a view, after the
// benchmark read it) that are mapped by huge pages (PMD-mapped: 2 MiB a
// TLB entry), from /proc/self/smaps. 0 on 4 KiB pages; a file system with
// large folios (ext4 since Linux 6.16) may give part of a file some.
func ReportHugeShare(b *testing.B, path string) {
	rss, pmd, ok := hugeShare(path)
	if ok && rss > 0 {
		b.ReportMetric(100*float64(pmd)/float64(rss), "pmd-%")
	}
}

// hugeShare sums Rss and ShmemPmdMapped + FilePmdMapped (kB) of the
// mappings of path in /proc/self/smaps.
func hugeShare(path string) (rss, pmd int64, ok bool) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	mine := false
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") { // a mapping's first line
			mine = len(fields) >= 6 && fields[5] == path
			continue
		}
		if !mine || len(fields) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "Rss:":
			rss += n
		case "ShmemPmdMapped:", "FilePmdMapped:":
			pmd += n
		}
	}
	return rss, pmd, sc.Err() == nil
}
