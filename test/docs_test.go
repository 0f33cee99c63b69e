package test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
)

// docSession runs the console blocks of the page at path (relative to
// the repository) as one session in order, but for those whose first
// command starts with one of except, against one fresh node laid out as
// `make run` lays it out and named "vm" as the pages' node is, by the
// rules the README's tests follow (readme_test.go): what the page shows
// a command printing is what it must print, but for the figures no run
// repeats and what an elision ("...") leaves out; a file it shows with
// "cat" is the reader's to write.
func docSession(t *testing.T, path string, except ...string) {
	t.Helper()
	dir := readmeDir(t)
	StartNode(t, bins, NodeOptions{
		Name: "vm", Bare: true, Dir: dir, Command: "./bin/cachecastd",
		DataDir: filepath.Join(dir, "data"), Socket: "cachecast.sock",
		Args: []string{"--gossip-addr=", "--node-name=vm"},
	})
	var steps []consoleStep
	for _, b := range markdownBlocks(t, filepath.Join("..", path)) {
		if b.lang != "console" {
			continue
		}
		s := parseConsole(b.lines)
		if len(s) > 0 && !startsWithAny(s[0].cmd, except) {
			steps = append(steps, s...)
		}
	}
	if len(steps) < 5 {
		t.Fatalf("%s has %d console steps to run; its session has more", path, len(steps))
	}
	shellRun(t, dir, steps, false)
}

// startsWithAny says whether s starts with one of prefixes.
func startsWithAny(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// TestDocsHTTPAPI runs docs/http-api.md's walk-through with curl.
func TestDocsHTTPAPI(t *testing.T) {
	t.Parallel()
	testkit.NeedTool(t, "curl", "curl")
	docSession(t, "docs/http-api.md")
}

// TestDocsCLI runs docs/cli.md's session with the CLI; its example of
// bench shows the figures of one run, which no run repeats.
func TestDocsCLI(t *testing.T) {
	t.Parallel()
	docSession(t, "docs/cli.md", "./bin/cachecast bench")
}

// TestDocsRedis runs docs/redis.md's session with redis-cli.
func TestDocsRedis(t *testing.T) {
	t.Parallel()
	testkit.NeedTool(t, "redis-cli", "redis-tools")
	docSession(t, "docs/redis.md")
}
