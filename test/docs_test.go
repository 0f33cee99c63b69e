package test

import (
	"path/filepath"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestDocsHTTPAPI runs docs/http-api.md's walk-through as written, its
// console blocks one session in order, against one node laid out as
// `make run` lays it out and named "vm" as the document's is, by the
// rules the README's tests follow (readme_test.go): what the document
// shows a command printing is what it must print, but for the figures no
// run repeats and what an elision ("...") leaves out; a file it shows
// with "cat" is the reader's to write.
func TestDocsHTTPAPI(t *testing.T) {
	t.Parallel()
	testkit.NeedTool(t, "curl", "curl")
	dir := readmeDir(t)
	StartNode(t, bins, NodeOptions{
		Name: "vm", Bare: true, Dir: dir, Command: "./bin/cachecastd",
		DataDir: filepath.Join(dir, "data"), Socket: "cachecast.sock",
		Args: []string{"--gossip-addr=", "--node-name=vm"},
	})
	var steps []consoleStep
	for _, b := range markdownBlocks(t, "../docs/http-api.md") {
		if b.lang == "console" {
			steps = append(steps, parseConsole(b.lines)...)
		}
	}
	if len(steps) < 10 {
		t.Fatalf("docs/http-api.md has %d console steps; the walk-through has more", len(steps))
	}
	shellRun(t, dir, steps, false)
}
