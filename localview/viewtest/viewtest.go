// Package viewtest is for tests of the shared view (package localview):
// values that carry their own checksum and a per-key counter, and reader
// processes (the test binary run again) that read a view file while a
// writer changes it and report everything they saw that breaks the rules:
// a torn value, a value from another key, a counter that went backwards.
//
// A test package's TestMain calls RunChildIfAsked first; StartReaders
// starts children running its reader loop.
package viewtest

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/cachecast/cachecast/localview"
)

// Environment of a reader child.
const (
	envPath    = "CACHECAST_VIEWTEST_PATH"
	envTopic   = "CACHECAST_VIEWTEST_TOPIC"
	envKeys    = "CACHECAST_VIEWTEST_KEYS"
	envMissing = "CACHECAST_VIEWTEST_MISSING_OK"
	envBatches = "CACHECAST_VIEWTEST_BATCHES"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Key is the name of key i.
func Key(i int) string { return fmt.Sprintf("k%07d", i) }

// Value is the value of key i at counter: counter u64, key index u32,
// filler derived from both, CRC-32C of all that in the last 4 bytes. size
// is at least 16.
func Value(i int, counter uint64, size int) []byte {
	v := make([]byte, size)
	binary.LittleEndian.PutUint64(v, counter)
	binary.LittleEndian.PutUint32(v[8:], uint32(i))
	for j := 12; j < size-4; j++ {
		v[j] = byte(uint64(j)*31 + counter*7 + uint64(i))
	}
	binary.LittleEndian.PutUint32(v[size-4:], crc32.Checksum(v[:size-4], castagnoli))
	return v
}

// Tag is the tag written with key i at counter: the counter in decimal,
// so that a tag and a value from two different writes do not match.
func Tag(counter uint64) string { return strconv.FormatUint(counter, 10) }

// Check verifies a value read for key i with its tag and returns its
// counter.
func Check(i int, v []byte, tag []byte) (uint64, error) {
	if len(v) < 16 {
		return 0, fmt.Errorf("value of %d bytes", len(v))
	}
	if got, want := binary.LittleEndian.Uint32(v[len(v)-4:]), crc32.Checksum(v[:len(v)-4], castagnoli); got != want {
		return 0, fmt.Errorf("torn value: checksum %08x, computed %08x", got, want)
	}
	if k := int(binary.LittleEndian.Uint32(v[8:])); k != i {
		return 0, fmt.Errorf("value of key %d read for key %d", k, i)
	}
	c := binary.LittleEndian.Uint64(v)
	if string(tag) != Tag(c) {
		return 0, fmt.Errorf("tag %q with the value of counter %d", tag, c)
	}
	return c, nil
}

// Report is what a reader child saw.
type Report struct {
	Reads       int64
	NotReady    int64
	NotFound    int64
	Generations int    // distinct generations read from
	Last        uint64 // the generation of the last read
	Errors      []string
	// MaxCounter is the greatest counter read per key index.
	MaxCounter map[int]uint64
	// Batches counts the GetMany reads that saw a whole batch (batch
	// readers: StartBatchReaders).
	Batches int64
}

// RunChildIfAsked runs the reader loop and exits when the process was
// started by StartReaders; otherwise it returns at once.
func RunChildIfAsked() {
	path := os.Getenv(envPath)
	if path == "" {
		return
	}
	keys, _ := strconv.Atoi(os.Getenv(envKeys))
	var rep Report
	if os.Getenv(envBatches) != "" {
		rep = batchLoop(path, os.Getenv(envTopic), keys)
	} else {
		rep = readLoop(path, os.Getenv(envTopic), keys, os.Getenv(envMissing) != "")
	}
	json.NewEncoder(os.Stdout).Encode(rep)
	os.Exit(0)
}

// readLoop reads random keys until stdin closes.
func readLoop(path, topic string, keys int, missingOK bool) Report {
	rep := Report{MaxCounter: map[int]uint64{}}
	stop, r := startLoop(path, &rep)
	if r == nil {
		return rep
	}
	gens := map[uint64]bool{}
	last := make([]uint64, keys)
	var buf []byte
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	for n := 0; ; n++ {
		if n%4096 == 0 && rep.stopped(stop, r, gens) {
			return rep
		}
		i := rng.IntN(keys)
		v, tag, _, err := r.GetInto(buf, topic, Key(i))
		gens[r.Generation()] = true
		switch {
		case errors.Is(err, localview.ErrNotReady):
			rep.NotReady++
			time.Sleep(100 * time.Microsecond)
			continue
		case errors.Is(err, localview.ErrNotFound):
			rep.NotFound++
			if !missingOK {
				rep.fail("key %d not found", i)
			}
			continue
		case err != nil:
			rep.fail("key %d: %v", i, err)
			continue
		}
		buf = tag[:0]
		rep.Reads++
		c, err := Check(i, v, tag)
		if err != nil {
			rep.fail("key %d: %v", i, err)
			continue
		}
		if c < last[i] {
			rep.fail("key %d: counter %d after %d", i, c, last[i])
		}
		last[i] = c
		rep.MaxCounter[i] = max(rep.MaxCounter[i], c)
	}
}

// fail adds an error to the report (the first 20).
func (rep *Report) fail(format string, a ...any) {
	if len(rep.Errors) < 20 {
		rep.Errors = append(rep.Errors, fmt.Sprintf(format, a...))
	}
}

// stopped reports whether stop is closed, and then ends rep with the
// generations seen (gens) and r's last; otherwise it takes a breath: the
// writer needs a core too.
func (rep *Report) stopped(stop <-chan struct{}, r *localview.Reader, gens map[uint64]bool) bool {
	select {
	case <-stop:
		rep.Generations = len(gens)
		rep.Last = r.Generation()
		return true
	default:
	}
	time.Sleep(200 * time.Microsecond)
	return false
}

// startLoop says the reader started, and opens the view at path (nil when
// stdin closed first); stop closes with stdin.
func startLoop(path string, rep *Report) (stop chan struct{}, r *localview.Reader) {
	stop = make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	fmt.Fprintln(os.Stderr, "reader started")
	for r == nil {
		var err error
		if r, err = localview.Open(path); err != nil {
			select {
			case <-stop:
				rep.fail("never opened %s: %v", path, err)
				return stop, nil
			case <-time.After(time.Millisecond):
			}
		}
	}
	return stop, r
}

// batchLoop reads keys 0..keys-1 of topic with one GetMany after another
// until stdin closes, and checks that each read saw one batch: every key
// there with a whole value (Check), all at the same counter (a batch's),
// never below the last read's. Keys not there yet are fine only when none
// is (before the first batch).
func batchLoop(path, topic string, keys int) Report {
	rep := Report{MaxCounter: map[int]uint64{}}
	stop, r := startLoop(path, &rep)
	if r == nil {
		return rep
	}
	gens := map[uint64]bool{}
	names := make([]string, keys)
	for i := range names {
		names[i] = Key(i)
	}
	topics := []string{topic}
	var items []localview.Item
	var buf []byte
	var last uint64
	for n := 0; ; n++ {
		if n%256 == 0 && rep.stopped(stop, r, gens) {
			return rep
		}
		var err error
		items, buf, err = r.GetMany(topics, names, items, buf)
		gens[r.Generation()] = true
		if errors.Is(err, localview.ErrNotReady) {
			rep.NotReady++
			time.Sleep(100 * time.Microsecond)
			continue
		}
		if err != nil {
			rep.fail("GetMany: %v", err)
			continue
		}
		rep.Reads++
		counter, first, found := uint64(0), -1, 0
		for i, it := range items {
			if !it.Found {
				continue
			}
			found++
			c, err := Check(i, it.Value, it.Tag)
			if err != nil {
				rep.fail("key %d: %v", i, err)
				continue
			}
			rep.MaxCounter[i] = max(rep.MaxCounter[i], c)
			if first < 0 {
				counter, first = c, i
			} else if c != counter {
				rep.fail("a mixed batch: key %d at counter %d, key %d at %d", first, counter, i, c)
			}
		}
		switch {
		case found == 0:
			rep.NotFound++
			if last != 0 {
				rep.fail("no key found after batch %d", last)
			}
			continue
		case found != keys:
			rep.fail("a part of a batch: %d keys of %d (batch %d)", found, keys, counter)
		case counter < last:
			rep.fail("batch %d after batch %d", counter, last)
		}
		if counter != last {
			rep.Batches++
		}
		last = max(last, counter)
	}
}

// StartBatchReaders starts n reader processes that read keys 0..keys-1 of
// topic in the view at path with GetMany, one read after another, and
// check that each saw all of one batch (keys with values at one counter).
func StartBatchReaders(t testing.TB, n int, path, topic string, keys int) []*Child {
	t.Helper()
	return startChildren(t, n, path, topic, keys, envBatches+"=1")
}

// Child is a running reader process.
type Child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
}

// StartReaders starts n reader processes (the test binary, os.Args[0],
// run again) on the view at path, reading keys 0..keys-1 of topic. With
// missingOK a key not found is counted, not an error (a view being
// filled). It waits until each has started.
func StartReaders(t testing.TB, n int, path, topic string, keys int, missingOK bool) []*Child {
	t.Helper()
	var env []string
	if missingOK {
		env = append(env, envMissing+"=1")
	}
	return startChildren(t, n, path, topic, keys, env...)
}

func startChildren(t testing.TB, n int, path, topic string, keys int, env ...string) []*Child {
	t.Helper()
	var out []*Child
	for range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envPath+"="+path, envTopic+"="+topic, envKeys+"="+strconv.Itoa(keys))
		cmd.Env = append(cmd.Env, env...)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &Child{cmd: cmd, stdin: stdin, stdout: stdout}
		t.Cleanup(func() { c.cmd.Process.Kill(); c.cmd.Wait() })
		sc := bufio.NewScanner(stderr)
		if !sc.Scan() || sc.Text() != "reader started" {
			t.Fatalf("reader child: %q %v", sc.Text(), sc.Err())
		}
		go io.Copy(io.Discard, stderr)
		out = append(out, c)
	}
	return out
}

// Stop ends the reader and returns its report.
func (c *Child) Stop(t testing.TB) Report {
	t.Helper()
	c.stdin.Close()
	var rep Report
	if err := json.NewDecoder(c.stdout).Decode(&rep); err != nil {
		t.Fatalf("reader report: %v", err)
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("reader exit: %v", err)
	}
	return rep
}

// Verify fails t for every error a report holds, for a reader that read
// nothing, and for a counter greater than the greatest the writer wrote
// (published[i], a value from the future).
func Verify(t testing.TB, name string, rep Report, published []uint64) {
	t.Helper()
	for _, e := range rep.Errors {
		t.Errorf("%s: %s", name, e)
	}
	if rep.Reads == 0 {
		t.Errorf("%s: read no value (not ready %d, not found %d)", name, rep.NotReady, rep.NotFound)
	}
	for i, c := range rep.MaxCounter {
		if i < 0 || i >= len(published) || c > published[i] {
			t.Errorf("%s: key %d read at counter %d, the writer wrote up to %d", name, i, c, published[min(max(i, 0), len(published)-1)])
		}
	}
	t.Logf("%s: %d reads, %d not ready, %d not found, %d generations", name, rep.Reads, rep.NotReady, rep.NotFound, rep.Generations)
}
