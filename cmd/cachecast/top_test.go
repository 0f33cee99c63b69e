package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/daemontest"
	"github.com/cachecast/cachecast/internal/testkit"
)

// TestTop runs `cachecast top` against two real nodes: both up with
// their keys, rates from the second answer on; then one stopped shows
// down.
func TestTop(t *testing.T) {
	c := daemontest.NewCluster(t, 2, func(i int, cfg *daemon.Config) {})
	sock := c.Nodes[0].Socket
	ctx := context.Background()
	for _, k := range []string{"sku-1", "sku-2", "sku-3"} {
		cliSocket(ctx, t, sock, "", "publish", "prices", k, "1").check(t, 0)
	}
	testkit.Eventually(t, 10*time.Second, "node1 holds the 3 keys", func() bool {
		k, ok := c.Nodes[1].D.Store().Get("prices", "sku-3")
		return ok && string(k.Value) == "1"
	})
	out := cliSocket(ctx, t, sock, "", "top", "--count", "2", "--interval", "600ms").check(t, 0).stdout
	frames := strings.Split(out, "\n\n")
	if len(frames) != 2 {
		t.Fatalf("%d frames, want 2:\n%s", len(frames), out)
	}
	for i, f := range frames {
		for _, want := range []string{"node0 sees 2 of 2 members up", "MEMBER", `node0\*\s+up\s+\d+\s+3\s`, `node1\s+up\s+\d+\s+3\s`} {
			if !regexp.MustCompile(want).MatchString(f) {
				t.Fatalf("frame %d lacks %q:\n%s", i, want, f)
			}
		}
	}
	if !regexp.MustCompile(`node1\s+up\s+\d+\s+3\s+0\.0\s+0\.0\s+\S+\s+\S+\s`).MatchString(frames[1]) {
		t.Fatalf("the second frame has no rates for node1:\n%s", frames[1])
	}

	c.Nodes[1].Stop()
	testkit.Until(t, 15*time.Second, "node1 down in top", func() string {
		out := cliSocket(ctx, t, sock, "", "top", "--count", "1").stdout
		if !regexp.MustCompile(`node1\s+down\s`).MatchString(out) {
			return out
		}
		return ""
	})
	cliSocket(ctx, t, sock, "", "top", "--interval", "1ms").check(t, 2)
}
