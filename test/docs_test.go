package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
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

// TestDocsSharedView runs docs/shared-view.md's Go and Python snippets
// as written, but for the view file's path (the node's instead of the
// package's), against a node that holds the keys they read, once its
// view has them: the Go one prints the value of sku-42 its GetMany read,
// the Python one the value, tag and HLC its get read.
func TestDocsSharedView(t *testing.T) {
	t.Parallel()
	py := testkit.NeedTool(t, "python3", "python3")
	snippets := map[string]string{}
	for _, b := range markdownBlocks(t, "../docs/shared-view.md") {
		snippets[b.lang] = strings.Join(b.lines, "\n")
	}
	dir := readmeDir(t)
	n := StartNode(t, bins, NodeOptions{Name: "vm", Dir: dir, Socket: filepath.Join(dir, "cachecast.sock")})
	var last client.PutResult
	for _, k := range []string{"sku-43", "sku-42"} {
		r, err := n.Client.Publish(ctx(t), "prices", k, []byte("12.50"), "eu")
		if err != nil {
			t.Fatal(err)
		}
		last = r
	}
	view := viewPath(n)
	waitInView(t, view, "prices", map[string]viewEntry{"sku-42": {"12.50", "eu"}, "sku-43": {"12.50", "eu"}})

	out := runGoSnippet(t, "docs/shared-view.md", snippets["go"], view, []string{"time"}, "_, _, _, _ = price, tag, stamp, v")
	if out != "12.50\n" {
		t.Errorf("docs/shared-view.md's Go snippet printed %q; want the value of sku-42, 12.50", out)
	}

	if !strings.Contains(snippets["python"], snippetView) {
		t.Fatalf("docs/shared-view.md's Python snippet no longer opens %s:\n%s", snippetView, snippets["python"])
	}
	module, err := filepath.Abs("../localview/python")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", strings.ReplaceAll(snippets["python"], snippetView, strconv.Quote(view)))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+module)
	b, err := cmd.CombinedOutput()
	if want := fmt.Sprintf("b'12.50' b'eu' %d", last.HLC); err != nil || strings.TrimSpace(string(b)) != want { // value and tag are bytes
		t.Errorf("docs/shared-view.md's Python snippet printed %q (%v); want %q", b, err, want)
	}
}

// viewEntry is a key's value and tag as a view file holds them.
type viewEntry struct{ value, tag string }

// waitInView waits until the view file at path holds want, each key of
// topic with its value and tag (the node's mirror writes the view after
// a publish answers).
func waitInView(t *testing.T, path, topic string, want map[string]viewEntry) {
	t.Helper()
	r, err := localview.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	testkit.Until(t, 20*time.Second, "the keys in the view", func() string {
		for k, w := range want {
			v, tag, _, err := r.Get(topic, k)
			if err != nil || (viewEntry{string(v), tag}) != w {
				return fmt.Sprintf("%s: %q %q %v; want %q %q", k, v, tag, err, w.value, w.tag)
			}
		}
		return ""
	})
}
