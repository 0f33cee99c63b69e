package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// BenchmarkBoundaryLatencyProcs is BenchmarkBoundaryLatency with one
// cachecastd process a node (StartProcs: 1 MiB segments), so that no
// node shares a Go scheduler or a memory map with another: each round
// subscribes to a new topic on every node over HTTP (NDJSON), publishes
// boundaryRecords keyed 1 KiB values to it on the first node over HTTP,
// one every boundaryEvery, and times each from the PUT to its line on
// the last node's stream. The records whose topic offset or whose seq
// (the publisher's origin index) opens an index chunk are reported apart
// from the others; segment boundaries are among the others (about one in
// a thousand). The binary is $CACHECAST_BIN, else one built from this
// tree. Latencies in ms.
//
//	CACHECAST_BENCH_DIR=/var/tmp go test -run '^$' -bench BoundaryLatencyProcs -benchtime 2x ./internal/fleet/
func BenchmarkBoundaryLatencyProcs(b *testing.B) {
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	bin := os.Getenv("CACHECAST_BIN")
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "cachecastd")
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/cachecast/cachecast/cmd/cachecastd").CombinedOutput(); err != nil {
			b.Fatalf("go build: %v\n%s", err, out)
		}
	}
	pf, err := StartProcs(ctx, bin, testkit.BenchDir(b), boundaryNodes, "")
	if err != nil {
		b.Fatal(err)
	}
	defer pf.Close()
	lat := boundaryRounds(b, func(topic string) map[string][]time.Duration { return procsRound(ctx, b, pf, topic) })
	reportBoundaries(b, lat, "index", "other")
}

// procsRound publishes a round to topic on the first process and returns
// the latencies of its records by class. Offset 0, which makes the
// topic, is not timed: it opens the streams.
func procsRound(ctx context.Context, b *testing.B, pf *Procs, topic string) map[string][]time.Duration {
	pub := pf.Procs[0]
	val := bytes.Repeat([]byte("v"), 1<<10)
	if _, err := putSeq(pub, topic, "k0", val); err != nil {
		b.Fatal(err)
	}
	arrivals := newArrivals(len(pf.Procs), boundaryRecords) // by offset-1, from 0
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	for i, p := range pf.Procs {
		// The topic reaches the other nodes with offset 0: until then
		// they refuse the stream.
		for err := subscribe(sctx, p, topic, func(offset uint64) { arrivals.note(i, offset) }); err != nil; {
			select {
			case <-ctx.Done():
				b.Fatalf("%v (%v)", err, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
			err = subscribe(sctx, p, topic, func(offset uint64) { arrivals.note(i, offset) })
		}
	}
	sent := make([]time.Time, boundaryRecords)
	took := make([]time.Duration, boundaryRecords)
	class := make([]string, boundaryRecords)
	next := time.Now()
	for i := range boundaryRecords {
		next = next.Add(boundaryEvery)
		time.Sleep(time.Until(next)) // the publisher's pace, not a wait on the fleet
		sent[i] = time.Now()
		seq, err := putSeq(pub, topic, fmt.Sprintf("k%d", i+1), val)
		if err != nil {
			b.Fatal(err)
		}
		took[i] = time.Since(sent[i])
		class[i] = "other"
		if indexBoundary(uint64(i+1)) || indexBoundary(seq-1) {
			class[i] = "index"
		}
	}
	at, err := arrivals.wait(ctx)
	if err != nil {
		b.Fatal(err)
	}
	lat := map[string][]time.Duration{}
	for i, t := range at {
		lat[class[i]] = append(lat[class[i]], t.Sub(sent[i]))
		lat[class[i]+"-publish"] = append(lat[class[i]+"-publish"], took[i])
	}
	return lat
}

// putSeq writes key in topic on p and returns the record's seq.
func putSeq(p *Proc, topic, key string, val []byte) (uint64, error) {
	req, _ := http.NewRequest(http.MethodPut, "http://x/v1/topics/"+topic+"/keys/"+key, bytes.NewReader(val))
	resp, err := p.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s: put: %w", p.Name, err)
	}
	defer resp.Body.Close()
	var r struct {
		Seq uint64 `json:"seq"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: put: %s %v", p.Name, resp.Status, err)
	}
	return r.Seq, nil
}

// subscribe streams topic from its first message on p and calls note
// with the offset of each message after it (offsets 1, 2, ...: record i
// of a round is offset i+1) as its line arrives, until ctx ends.
func subscribe(ctx context.Context, p *Proc, topic string, note func(uint64)) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://x/v1/topics/"+topic+"/subscribe?from=earliest", nil)
	c := testkit.UnixClient(p.Socket, false, 0)
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%s: subscribe: %w", p.Name, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return fmt.Errorf("%s: subscribe: %s", p.Name, resp.Status)
	}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var m struct {
				Offset uint64 `json:"offset"`
			}
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Offset > 0 {
				note(m.Offset - 1)
			}
		}
	}()
	return nil
}
