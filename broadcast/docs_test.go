package broadcast

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestDocsProtocolRange checks that the docs name the data-port protocol
// versions this build speaks: prose no test guards drifts (README once said
// 2 to 4 while the build spoke 2 to 6), and an operator plans a rolling
// upgrade by it. Every "speaks N to M" in the docs must be this build's range.
func TestDocsProtocolRange(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`(?:this one|this build)\s+speaks\s+(\d+)\s+to\s+(\d+)`)
	found := docsMatching(t, re, func(f string, m [][]byte) {
		lo, _ := strconv.Atoi(string(m[1]))
		hi, _ := strconv.Atoi(string(m[2]))
		if lo != ProtocolMin || hi != ProtocolMax {
			t.Errorf("%s says this build speaks %d to %d; it speaks %d to %d (broadcast.ProtocolMin, ProtocolMax)", f, lo, hi, ProtocolMin, ProtocolMax)
		}
	})
	if found == 0 {
		t.Errorf("no doc says which protocol versions this build speaks (\"this one speaks N to M\" in README.md, DESIGN.md, ARCHITECTURE.md or docs/)")
	}
}

// TestDocsProtocolNames checks each protocol version the docs name by its
// constant ("data protocol 4 (`broadcast.ProtocolTimed`)") against the
// constant: a feature moved to another version fails here until the
// prose follows.
func TestDocsProtocolNames(t *testing.T) {
	t.Parallel()
	named := map[string]int{
		"ProtocolMin": ProtocolMin, "ProtocolMax": ProtocolMax, "ProtocolTimed": ProtocolTimed,
		"ProtocolDigest": ProtocolDigest, "ProtocolCut": ProtocolCut, "ProtocolExpiry": ProtocolExpiry,
		"ProtocolCounter": ProtocolCounter, "ProtocolAbsent": ProtocolAbsent, "ProtocolRevival": ProtocolRevival,
	}
	re := regexp.MustCompile("(\\d+) \\(`(?:broadcast\\.)?(Protocol\\w+)`\\)")
	found := docsMatching(t, re, func(f string, m [][]byte) {
		said, _ := strconv.Atoi(string(m[1]))
		v, ok := named[string(m[2])]
		switch {
		case !ok:
			t.Errorf("%s names %s, which is not one of broadcast's protocol constants", f, m[2])
		case said != v:
			t.Errorf("%s says %s is %d; it is %d", f, m[2], said, v)
		}
	})
	if found == 0 {
		t.Errorf("no doc names a protocol version by its constant (\"protocol 4 (`broadcast.ProtocolTimed`)\"): the pattern this test reads has changed")
	}
}

// docsMatching calls check with each match of re in README.md, DESIGN.md,
// ARCHITECTURE.md and docs/, and counts them.
func docsMatching(t *testing.T, re *regexp.Regexp, check func(file string, m [][]byte)) int {
	t.Helper()
	files, _ := filepath.Glob("../docs/*.md")
	files = append(files, "../README.md", "../DESIGN.md", "../ARCHITECTURE.md")
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			found++
			check(f, m)
		}
	}
	return found
}
