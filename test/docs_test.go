package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/daemon/daemontest"
	"github.com/cachecast/cachecast/internal/daemonhooks"
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
	docSessionOn(t, path, []string{"--gossip-addr="}, except...)
}

// docSessionOn is docSession on a node started with args, the flags
// its page starts it with.
func docSessionOn(t *testing.T, path string, args []string, except ...string) {
	t.Helper()
	dir := readmeDir(t)
	StartNode(t, bins, NodeOptions{
		Name: "vm", Bare: true, Dir: dir, Command: "./bin/cachecastd",
		DataDir: filepath.Join(dir, "data"), Socket: "cachecast.sock",
		Args: append([]string{"--node-name=vm"}, args...),
	})
	shellRun(t, dir, docSteps(t, path, except...), false, nil)
}

// docSteps are the steps of the console blocks of the page at path, but
// for the blocks whose first command starts with one of except.
func docSteps(t *testing.T, path string, except ...string) []consoleStep {
	t.Helper()
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
	return steps
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

// TestDocsGroups runs docs/groups.md's session with the CLI and curl on
// a node started as the page starts it, with the short settings that
// dead-letter a message in seconds: the page must name them, and its
// steps that wait for one run again until they print what it shows.
func TestDocsGroups(t *testing.T) {
	t.Parallel()
	testkit.NeedTool(t, "curl", "curl")
	var args []string
	for _, b := range markdownBlocks(t, "../docs/groups.md") {
		if f := strings.Fields(strings.Join(b.lines, " ")); b.lang == "sh" && len(f) > 0 && f[0] == "./bin/cachecastd" {
			args = append(args, f[1:]...)
		}
	}
	for _, flag := range []string{"--gossip-addr=", "--ack-timeout", "--retry-backoff", "--max-retries"} {
		if !slices.Contains(args, flag) {
			t.Fatalf("docs/groups.md starts its node with %q, without %s", args, flag)
		}
	}
	docSessionOn(t, "docs/groups.md", args)
}

// pageMidnight is the coming midnight of docs/time.md's session: the
// instant its outputs show.
var pageMidnight = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

// TestDocsTime runs docs/time.md's session with curl, the CLI and
// redis-cli against a node whose clock the test holds (a daemon in this
// process, config.WithHooks): it stands still, so a TTL reads as set,
// until the step the page runs "after midnight", where it moves to the
// instant the session's scheduled values take effect (the coming
// midnight, as the daemon holds it pending), and the test waits until
// they are in force. The session's instants are those of the day it
// runs: its outputs show them as the page's (pageMidnight).
func TestDocsTime(t *testing.T) {
	t.Parallel()
	testkit.NeedTool(t, "curl", "curl")
	testkit.NeedTool(t, "redis-cli", "redis-tools")
	dir := readmeDir(t)
	var now atomic.Int64 // the node's clock, Unix ms
	now.Store(time.Now().UnixMilli())
	n := daemontest.Start(t, func(cfg *daemon.Config) {
		cfg.NodeName = "vm"
		cfg.DataDir = filepath.Join(dir, "data")
		cfg.Socket = filepath.Join(dir, "cachecast.sock")
		*cfg = config.WithHooks(*cfg, daemonhooks.Hooks{Clock: func() time.Time { return time.UnixMilli(now.Load()) }})
	})
	c := client.New(n.Socket)
	defer c.Close()
	var shown []string // the run's instants, each followed by the page's
	pending := func() []client.Pending {
		recs, _, err := c.Pending(ctx(t), "prices", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	shellRun(t, dir, docSteps(t, "docs/time.md"), false, func(s consoleStep) []string {
		recs := pending()
		for _, r := range recs {
			day := r.EffectiveAt.Truncate(24 * time.Hour)
			shown = append(shown, day.Format("2006-01-02T"), pageMidnight.Format("2006-01-02T"),
				strconv.FormatInt(day.UnixMilli(), 10), strconv.FormatInt(pageMidnight.UnixMilli(), 10))
		}
		if _, comment, _ := strings.Cut(s.cmd, "#"); strings.Contains(comment, "after midnight") {
			if len(recs) == 0 {
				t.Fatalf("step %q: nothing is pending to take effect", s.cmd)
			}
			at := recs[0].EffectiveAt
			for _, r := range recs {
				if r.EffectiveAt.Before(at) {
					at = r.EffectiveAt
				}
			}
			now.Store(at.UnixMilli())
			testkit.Until(t, 20*time.Second, "the values scheduled for "+at.String()+" in force", func() string {
				for _, r := range pending() {
					if !r.EffectiveAt.After(at) {
						return fmt.Sprintf("%s still pending", r.Key)
					}
				}
				return ""
			})
		}
		return shown
	})
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
