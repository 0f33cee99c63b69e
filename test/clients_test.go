package test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestRedisClients runs the Redis clients applications use, unchanged,
// against a daemon's Redis door: redis-py (Debian's python3-redis; its
// default pipeline is a MULTI/EXEC transaction, and a WATCH then MULTI by
// hand), node-redis and ioredis (from npm, as test/clients/package-lock.json
// pins them) with multi().exec() of writes and a read, and plain SET and
// GET. Each script (test/clients/) checks its answers and prints ok.
// Without python3-redis, node or npm the test is skipped outside CI
// (.ci/run installs them) and fails in CI.
func TestRedisClients(t *testing.T) {
	t.Parallel()
	n := StartNode(t, bins, NodeOptions{Name: "clients", Args: smallNode})
	sock := n.RedisSocket()
	src, err := filepath.Abs("clients")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmd  func(t *testing.T) *exec.Cmd
	}{
		{"redis-py", func(t *testing.T) *exec.Cmd {
			return exec.Command(pythonWithRedis(t), filepath.Join(src, "redis_py.py"), sock, "py")
		}},
		{"node-redis", func(t *testing.T) *exec.Cmd {
			return exec.Command(testkit.NeedTool(t, "node", "nodejs"), filepath.Join(npmInstall(t, src), "node_redis.mjs"), sock, "noderedis")
		}},
		{"ioredis", func(t *testing.T) *exec.Cmd {
			return exec.Command(testkit.NeedTool(t, "node", "nodejs"), filepath.Join(npmInstall(t, src), "ioredis.mjs"), sock, "ioredis")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := tc.cmd(t)
			cmd := exec.CommandContext(ctx, c.Path, c.Args[1:]...)
			cmd.Dir = filepath.Dir(c.Args[1])
			out, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "ok" {
				t.Fatalf("%s: %v\n%s", tc.name, err, out)
			}
		})
	}
}

// pythonWithRedis is a python3 that imports redis (Debian's python3-redis
// is for /usr/bin/python3, which may not be the python3 first on PATH).
func pythonWithRedis(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import redis").Run() == nil {
			return path
		}
	}
	testkit.Missing(t, "no python3 imports redis: install the Debian package python3-redis (.ci/run does)")
	return ""
}

// npmInstall installs the packages of src's package-lock.json with npm ci
// into a directory of the user's cache named by the lock's hash (once per
// lock, outside the module), copies src's scripts beside them (Node
// resolves a module's imports from the script's own directory), and
// returns that directory.
func npmInstall(t *testing.T, src string) string {
	t.Helper()
	npm := testkit.NeedTool(t, "npm", "npm")
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256(lock)
	dir := filepath.Join(cache, "cachecast-test-clients", hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		tmp, err := os.MkdirTemp(filepath.Dir(dir), "install")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		copyFiles(t, src, tmp, "package.json", "package-lock.json")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
		if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
			if _, statErr := os.Stat(filepath.Join(dir, "node_modules")); statErr != nil {
				t.Fatal(err)
			}
		}
	}
	copyFiles(t, src, dir, "node_redis.mjs", "ioredis.mjs", "package.json")
	return dir
}

// copyFiles copies the named files of src into dst.
func copyFiles(t *testing.T, src, dst string, names ...string) {
	t.Helper()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
