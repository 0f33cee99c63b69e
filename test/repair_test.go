package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// A real cachecastd whose flushed log takes 64 bytes of garbage while it
// is stopped starts again, serves every key it still holds, and `cachecast
// repair` names the records lost (nobody else holds them: it is alone)
// and exits 1 until `cachecast repair accept` gives them up.
func TestRepairCLI(t *testing.T) {
	t.Parallel()
	n := StartNode(t, bins, NodeOptions{Name: "repair", Args: smallNode})
	for i := range 300 {
		if r := httpDo(t, n, "PUT", fmt.Sprintf("/v1/topics/prices/keys/sku-%d", i), strings.NewReader(strings.Repeat("v", 150))); r.status != 200 {
			t.Fatalf("PUT: %d %s", r.status, r.body)
		}
	}
	n.Stop()
	seg := filepath.Join(n.DataDir, "log", fmt.Sprintf("%020d", 0))
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5, 0x5a, 0xc3, 0x3c}, 16), int64(end/2)&^7); err != nil {
		t.Fatal(err)
	}
	f.Close()

	n.Start() // it used to refuse with "record corrupt" once the snapshot was gone, or end the readers' streams
	var out cliResult
	testkit.Eventually(t, 10*time.Second, "cachecast repair to list the lost records", func() bool {
		out = cli(t, n, "", "repair")
		return out.code == 1 && strings.Contains(out.stdout, "held by no live peer")
	})
	if !strings.Contains(out.stdout, "prices") || !strings.Contains(out.stdout, "corrupt") || !strings.Contains(out.stdout, "false") {
		t.Fatalf("cachecast repair:\n%s", out.stdout)
	}
	st := cli(t, n, "", "status")
	if !strings.Contains(st.stdout, "records lost to a damaged log") {
		t.Fatalf("cachecast status:\n%s", st.stdout)
	}
	acc := cli(t, n, "", "repair", "accept").ok(t, "repair accept")
	if !strings.Contains(acc.stdout, "records given up") {
		t.Fatalf("cachecast repair accept:\n%s", acc.stdout)
	}
	cli(t, n, "", "repair").ok(t, "repair after accept")
	// The node serves on: a write, and the keys it holds.
	if r := httpDo(t, n, "PUT", "/v1/topics/prices/keys/after", strings.NewReader("x")); r.status != 200 {
		t.Fatalf("PUT after the repair: %d %s", r.status, r.body)
	}
	if r := httpDo(t, n, "GET", "/v1/topics/prices/keys/sku-0", nil); r.status != 200 {
		t.Fatalf("GET: %d %s", r.status, r.body)
	}
}
