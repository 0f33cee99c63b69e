package test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// procKiB reads a field of /proc/PID/status (VmRSS, VmHWM), in KiB.
func procKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// settledRSS waits until the daemon pid's resident memory has settled,
// resets its peak (VmHWM) and returns its resident memory, in KiB: the
// base a burst is measured from. Its segment preparer faults in the next
// segment (64 MiB) in the background after start, which would otherwise
// count as the burst's.
func settledRSS(t *testing.T, pid int) int64 {
	t.Helper()
	settled := testkit.Poll(t, 20*time.Second, func() string {
		before := procKiB(t, pid, "VmRSS")
		time.Sleep(500 * time.Millisecond)
		if after := procKiB(t, pid, "VmRSS"); after-before > 1<<10 || before-after > 1<<10 {
			return fmt.Sprintf("resident memory still moving: %d KiB, then %d KiB", before, after)
		}
		return ""
	})
	if settled != "" {
		t.Fatal(settled)
	}
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("resetting the daemon's VmHWM: %v", err)
	}
	return procKiB(t, pid, "VmRSS")
}

// Eight concurrent batches of 60 MB, all refused (the last line is not
// JSON), sent to a cachecastd with the default limits, as in issue 13:
// the daemon's resident memory stays within what two bodies at a time take
// (its uid's share of --max-body-memory), the rest are refused from their
// Content-Length, nothing is stored, and the memory goes back to the
// system after the burst. Before the body budget the same load took the
// daemon from 142 MiB to 653 MiB resident, where it stayed.
func TestBodyMemoryBurst(t *testing.T) {
	t.Parallel()
	b := shippedBins(t)
	const batches, size = 8, 60 << 20
	line := `{"key":"k","value":"` + strings.Repeat("v", 1000) + `"}` + "\n"
	var body bytes.Buffer
	for body.Len() < size-len(line) {
		body.WriteString(line)
	}
	body.WriteString(`{"key":` + "\n")

	n := StartNode(t, b, NodeOptions{Name: "bodymem", Args: []string{"--log-level", "warn"}})
	if r := httpDo(t, n, "PUT", "/v1/topics/t/keys/k", strings.NewReader("warm")); r.status != 200 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	pid := n.PID()
	base := settledRSS(t, pid)

	head := fmt.Sprintf("POST /v1/topics/mem/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n", body.Len())
	answers := make([]string, batches)
	var wg sync.WaitGroup
	for i := range batches {
		wg.Go(func() {
			c, err := net.Dial("unix", n.Socket)
			if err != nil {
				answers[i] = err.Error()
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			go func() {
				// A refused one is answered before its body: the rest of
				// it then fails to write.
				_, _ = io.WriteString(c, head)
				_, _ = c.Write(body.Bytes())
			}()
			r, err := readResponseFrom(bufio.NewReader(c))
			if err != nil {
				answers[i] = err.Error()
				return
			}
			answers[i] = strconv.Itoa(r.status) + " " + r.code()
		})
	}
	wg.Wait()
	peak := procKiB(t, pid, "VmHWM")
	counts := map[string]int{}
	for _, a := range answers {
		counts[a]++
	}
	t.Logf("answers %v; resident %d MiB before, %d MiB at the peak", counts, base>>10, peak>>10)
	// Two bodies of 60 MB and what decoding them takes (138 MiB when
	// measured); eight at once took 511 MiB.
	if grew := (peak - base) >> 10; grew > 300 {
		t.Fatalf("resident memory grew by %d MiB under the burst; want at most 300", grew)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rss := procKiB(t, pid, "VmRSS")
		if (rss-base)>>10 <= 48 {
			t.Logf("resident %d MiB after the burst", rss>>10)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resident memory %d MiB 10s after the burst, %d MiB before: not given back", rss>>10, base>>10)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if counts["400 bad_json"] < 1 || counts["429 too_many"] < 1 || counts["400 bad_json"]+counts["429 too_many"] != batches {
		t.Fatalf("answers %v; want each 400 bad_json or 429 too_many, some of each", counts)
	}
	if r := httpDo(t, n, "GET", "/v1/topics/mem/keys", nil); r.status != 200 || !strings.Contains(string(r.body), `"keys":[]`) {
		t.Fatalf("keys of the refused batches' topic: %d %s", r.status, r.body)
	}
	// The node still takes a batch.
	r := httpDo(t, n, "POST", "/v1/topics/mem/messages", strings.NewReader(line+line), "Content-Type", "application/x-ndjson")
	if r.status != http.StatusOK {
		t.Fatalf("a small batch after the burst: %d %s", r.status, r.body)
	}
}
