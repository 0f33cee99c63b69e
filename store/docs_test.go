package store

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/cachecast/cachecast/store/internal/segment"
)

// TestReadmeDiskRoom checks the room README.md's "Running it in
// production" says a node needs beyond its retained log against the
// constants that decide it: with segments under a file's target size
// (segment.FileTarget), the preparer makes up to segment.ReadyAhead of
// them ahead, and the recycled segments of the file still written are at
// most one file.
func TestReadmeDiskRoom(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`with segments under (\d+) MiB, up to (\d+) MiB of them ahead and the\s+recycled segments of the file still written, up to (\d+) MiB\)`)
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatalf("README.md no longer says the disk room this test checks (%s): update the test with the prose", re)
	}
	for i, want := range []int{segment.FileTarget, segment.ReadyAhead, segment.FileTarget} {
		if said, _ := strconv.Atoi(string(m[i+1])); said<<20 != want {
			t.Errorf("README.md says %s MiB in %q; the constant is %d MiB", m[i+1], m[0], want>>20)
		}
	}
}
