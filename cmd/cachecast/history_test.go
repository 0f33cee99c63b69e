package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/daemontest"
)

// TestHistory runs `cachecast history` against a real node: a key's two
// writes and its delete, newest first, each kind on its line; --limit
// cuts it, and the last line says the scan stopped short.
func TestHistory(t *testing.T) {
	c := daemontest.NewCluster(t, 1, func(i int, cfg *daemon.Config) {})
	sock := c.Nodes[0].Socket
	ctx := context.Background()
	cliSocket(ctx, t, sock, "", "publish", "prices", "sku-1", "10.00").check(t, 0)
	cliSocket(ctx, t, sock, "", "publish", "prices", "sku-2", "x").check(t, 0)
	cliSocket(ctx, t, sock, "", "publish", "--tag", "eu", "prices", "sku-1", "12.50").check(t, 0)
	cliSocket(ctx, t, sock, "", "del", "prices", "sku-1").check(t, 0)

	out := cliSocket(ctx, t, sock, "", "history", "prices", "sku-1").check(t, 0).stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{`^OFFSET\s+KIND\s+VALUE\s+TAG\s+HLC\s+ORIGIN\s+SEQ\s+TIME$`, `^3\s+delete\s+-\s+\d+\s+[0-9a-f]{16}\s+4\s`,
		`^2\s+write\s+"12.50"\s+eu\s+\d+\s+[0-9a-f]{16}\s+3\s`, `^0\s+write\s+"10.00"\s+\d+\s+[0-9a-f]{16}\s+1\s`}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(lines[i]) {
			t.Errorf("line %d %q does not match %s", i, lines[i], w)
		}
	}
	out = cliSocket(ctx, t, sock, "", "history", "--limit", "1", "prices", "sku-1").check(t, 0).stdout
	if !strings.Contains(out, "delete") || strings.Contains(out, "write") || !strings.Contains(out, "(read the last 1 messages of prices") {
		t.Errorf("--limit 1:\n%s", out)
	}
	if out := cliSocket(ctx, t, sock, "", "history", "--json", "prices", "sku-1").check(t, 0).stdout; !strings.HasPrefix(out, `{"topic":"prices","key":"sku-1","records":[{"offset":3,"kind":"delete"`) {
		t.Errorf("--json: %s", out)
	}
	cliSocket(ctx, t, sock, "", "history", "--limit", "0", "prices", "sku-1").check(t, 2)
}
