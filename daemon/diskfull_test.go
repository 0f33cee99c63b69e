package daemon

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
)

// TestHealthReportsFullDisk fills a small tmpfs until writes fail with
// disk_full: /healthz and /readyz must say so (507 disk_full) and the
// systemd STATUS line too, while reads go on; once the file system has room
// again they are ok without a write, and writes pass.
func TestHealthReportsFullDisk(t *testing.T) {
	mnt, remount := testkit.Tmpfs(t, "6m")
	cfg := testConfig(t)
	cfg.DataDir = filepath.Join(mnt, "data")
	td := startDaemon(t, cfg)
	value := strings.Repeat("x", 60<<10)
	var stored int
	for ; ; stored++ {
		r := td.do("PUT", fmt.Sprintf("/v1/topics/t/keys/k%d", stored), strings.NewReader(value))
		if r.status == 507 && r.errCode() == wire.CodeDiskFull {
			break
		}
		if r.status != 200 || stored > 1000 {
			t.Fatalf("PUT %d: %d %s", stored, r.status, r.body)
		}
	}
	if stored == 0 {
		t.Fatal("nothing fit on the file system")
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := td.do("GET", path, nil); r.status != 507 || r.errCode() != wire.CodeDiskFull {
			t.Errorf("%s on a full disk: %d %s; want 507 disk_full", path, r.status, r.body)
		}
	}
	if line := td.d.statusLine(); !strings.Contains(line, "DISK FULL") {
		t.Errorf("STATUS line on a full disk: %q", line)
	}
	if r := td.do("GET", "/v1/topics/t/keys/k0", nil); r.status != 200 {
		t.Errorf("a read on a full disk: %d %s", r.status, r.body)
	}

	remount("64m")
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := td.do("GET", path, nil); r.status != 200 {
			t.Errorf("%s once the disk has room: %d %s", path, r.status, r.body)
		}
	}
	td.put("t", "after", "room again")
}

// TestSmallDiskHoldsManyTopics: on a 2 MiB file system a node stores a
// value in each of many topics (each topic's and each origin's index start
// with a file of a few KiB, not a full chunk), and has it all after a
// restart.
func TestSmallDiskHoldsManyTopics(t *testing.T) {
	mnt, _ := testkit.Tmpfs(t, "2m")
	cfg := testConfig(t)
	cfg.DataDir = filepath.Join(mnt, "data")
	cfg.SegmentSize = 256 << 10
	cfg.MaxValueSize = 16 << 10
	cfg.MaxBodySize = 64 << 10
	const topics = 20
	td := startDaemon(t, cfg)
	if r := td.do("GET", "/readyz", nil); r.status != 200 {
		t.Fatalf("readyz: %d %s", r.status, r.body)
	}
	for i := range topics {
		td.put(fmt.Sprintf("topic-%d", i), "k", "hello")
	}
	td.stop()
	td = startDaemon(t, cfg)
	for i := range topics {
		if r := td.do("GET", fmt.Sprintf("/v1/topics/topic-%d/keys/k", i), nil); r.status != 200 || string(r.body) != "hello" {
			t.Fatalf("topic-%d after a restart: %d %s", i, r.status, r.body)
		}
	}
}
