package store

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cachecast/cachecast/store/record"
)

const (
	crashChildEnv = "CACHECAST_STORE_CRASH_CHILD"
	// crashReuseEnv makes the child keep its log within four segments, so
	// that it reuses segment files (and is killed after reuse); with
	// crashChunks, it writes small records in batches, so many that it
	// drops and reuses index chunk files too.
	crashReuseEnv = "CACHECAST_STORE_CRASH_REUSE"
)

// The crash tests' modes (crashReuseEnv's values).
const (
	crashPlain    = ""
	crashSegments = "segments"
	crashChunks   = "chunks"
)

// crashOptions are the child's options, and the parent's when it reopens.
func crashOptions(dir, mode string) Options {
	o := DefaultOptions(dir)
	o.SegmentSize = 64 << 10
	o.IndexChunkEntries = 1024
	o.Flush = FlushSync
	if mode != crashPlain {
		o.RetentionBytes = 4 * o.SegmentSize
	}
	return o
}

// crashSize is the value size of message seq in the crash test: it varies,
// so that records straddle pages and segment ends differently. Records of
// crashChunks are small: a thousand fit in the four segments.
func crashSize(mode string, seq uint64) int {
	if mode == crashChunks {
		return 20 + int(seq*7919%100)
	}
	return 50 + int(seq*7919%3000)
}

// crashBatch is how many records the child publishes at once: one a sync,
// or many, so that the records of crashChunks cross index chunks quickly.
func crashBatch(mode string) int {
	if mode == crashChunks {
		return 64
	}
	return 1
}

// crashChild is the body of the child process: it appends under sync
// flush forever and prints each acknowledged seq. The parent kills it.
func crashChild() {
	mode := os.Getenv(crashReuseEnv)
	s, err := Open(crashOptions(os.Getenv(crashChildEnv), mode))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	out := os.Stdout // unbuffered: a line written is a line the parent gets
	fmt.Fprintln(out, "ready")
	ms := make([]record.Message, crashBatch(mode))
	for {
		for i := range ms {
			seq := s.nextSeq + uint64(i)
			ms[i] = record.Message{Topic: "crash", Key: strconv.FormatUint(seq%97, 10), Value: value(int(seq), crashSize(mode, seq))}
		}
		res, err := s.PublishBatch(ms)
		for errors.Is(err, ErrFull) {
			// Retention waits for the snapshot to cover what it recycles.
			if err = s.Snapshot(); err == nil {
				res, err = s.PublishBatch(ms)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "child publish:", err)
			os.Exit(4)
		}
		var b []byte
		for _, r := range res {
			b = strconv.AppendUint(b, r.Seq, 10)
			b = append(b, '\n')
		}
		out.Write(b)
	}
}

// TestCrashSIGKILL kills a writing child process at random moments, at
// least 50 times, and checks after each kill that every acknowledged
// record is in the log byte for byte, that the log holds nothing it should
// not, and that appending goes on.
func TestCrashSIGKILL(t *testing.T) { crashRounds(t, 50, crashPlain) }

// TestCrashSIGKILLAfterReuse is TestCrashSIGKILL with the child's log
// bound to four segments: it reuses segment files without zeroing them,
// and is killed while writing into reused files, whose stale records
// recovery must never take for new ones. It goes on past its 30 rounds
// until the log has recycled 8 segments (a loaded machine writes little
// in a round), 300 rounds at most.
func TestCrashSIGKILLAfterReuse(t *testing.T) { crashRounds(t, 30, crashSegments) }

// TestCrashSIGKILLAfterChunkReuse is TestCrashSIGKILLAfterReuse with
// small records published 64 at a time: the topic's and the origin's
// index drop their chunks as the log recycles, and make the next ones
// from the dropped files (zeroed, renamed), so the child is killed while
// writing into reused index files, whose old entries recovery must never
// take for retained ones. It goes on past its 20 rounds until the topic
// index has dropped reusedChunks chunks of 1,024 entries.
func TestCrashSIGKILLAfterChunkReuse(t *testing.T) { crashRounds(t, 20, crashChunks) }

const (
	// reusedSegments is how many segments TestCrashSIGKILLAfterReuse
	// has the log recycle, at least.
	reusedSegments = 8
	// reusedChunks is how many index chunks of 1,024 entries (after the
	// first two, of 512 and 1,024) TestCrashSIGKILLAfterChunkReuse has
	// the topic index drop, at least: all but the first two kept free
	// and reused.
	reusedChunks = 6
)

func crashRounds(t *testing.T, rounds int, mode string) {
	reuse := mode != crashPlain
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	dir := t.TempDir()
	var acked uint64
	var recycled int64 // the log's oldest position after the last round
	var dropped uint64 // the topic index's first entry after the last round
	enough := func() bool {
		switch mode {
		case crashSegments:
			return recycled >= reusedSegments*crashOptions(dir, mode).SegmentSize
		case crashChunks:
			return dropped >= 512+1024*reusedChunks
		}
		return true
	}
	more := func(round int) bool { return round < rounds || !enough() && round < 10*rounds }
	round := 0
	for ; more(round); round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		cmd.Env = append(cmd.Env, crashReuseEnv+"="+mode)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		if !lines.Scan() || lines.Text() != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: child did not start: %s", round, stderr.String())
		}
		killAt := time.Duration(5+rng.IntN(60)) * time.Millisecond
		timer := time.AfterFunc(killAt, func() { cmd.Process.Signal(syscall.SIGKILL) })
		var prev uint64
		for lines.Scan() {
			seq, err := strconv.ParseUint(lines.Text(), 10, 64)
			if err != nil {
				t.Fatalf("round %d: child said %q", round, lines.Text())
			}
			if prev != 0 && seq != prev+1 {
				t.Fatalf("round %d: child acked %d after %d", round, seq, prev)
			}
			prev = seq
			acked = max(acked, seq)
		}
		timer.Stop()
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: child ended by itself (%v): %s", round, err, stderr.String())
		}

		s, err := Open(crashOptions(dir, mode))
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		// Every record retained, from the oldest on, byte for byte, seqs
		// without a gap, up to at least the last acknowledged one.
		var first, last uint64
		var poss []int64 // of the records retained, in order
		for pos := s.seglog.Oldest(); pos < s.seglog.End(); {
			next, err := s.seglog.ReadAt(pos, func(r record.Record, at int64) error {
				poss = append(poss, at)
				if last != 0 && r.Seq() != last+1 {
					return fmt.Errorf("seq %d after %d", r.Seq(), last)
				}
				if !bytes.Equal(r.Value(), value(int(r.Seq()), crashSize(mode, r.Seq()))) {
					return fmt.Errorf("record %d is not what was written", r.Seq())
				}
				if first == 0 {
					first = r.Seq()
				}
				last = r.Seq()
				return nil
			})
			if err != nil {
				t.Fatalf("round %d: read at %d: %v", round, pos, err)
			}
			pos = next
		}
		if last < acked || !reuse && first > 1 {
			t.Fatalf("round %d: the log holds seqs %d to %d after the crash, %d were acknowledged", round, first, last, acked)
		}
		if err := checkCrashIndexes(s, poss, first); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		recycled = s.seglog.Oldest()
		if ti := s.topics.Get("crash"); ti != nil {
			dropped = ti.First()
		}
		if err := s.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
	}
	if !enough() {
		t.Fatalf("the log was recycled only up to %d, the topic index dropped up to %d, in %d rounds: too few files reused to test", recycled, dropped, round)
	}
	if acked < uint64(rounds) {
		t.Fatalf("only %d writes acknowledged in %d rounds", acked, rounds)
	}
	t.Logf("%d rounds, %d writes acknowledged, log recycled up to %d, topic index from %d", round, acked, recycled, dropped)
}

// checkCrashIndexes checks that the indexes recovered after a crash hold
// the records retained, at poss (seqs first, first+1, ...): the topic's
// entries from the first retained record on, and no more, and the
// origin's seqs, each at its record's position (an index chunk made ahead
// and never written must read as nothing).
func checkCrashIndexes(s *Store, poss []int64, first uint64) error {
	if len(poss) == 0 {
		return nil
	}
	ti := s.topics.Get("crash")
	if ti == nil {
		return errors.New("no index for the topic")
	}
	off, err := ti.SearchPos(poss[0])
	if err != nil {
		return err
	}
	if n := ti.Len(); n != off+uint64(len(poss)) {
		return fmt.Errorf("the topic index ends at %d, want %d (%d records from offset %d)", n, off+uint64(len(poss)), len(poss), off)
	}
	for i, pos := range poss {
		e, err := ti.Entry(off + uint64(i))
		if err != nil || e.Pos != pos {
			return fmt.Errorf("topic entry %d: %+v, %v; want the record at %d", off+uint64(i), e, err, pos)
		}
		if got, ok := s.origins.Get(s.origin, first+uint64(i)); !ok || got != pos {
			return fmt.Errorf("origin seq %d at %d (%v), want %d", first+uint64(i), got, ok, pos)
		}
	}
	return nil
}
