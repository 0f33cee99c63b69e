package store

import (
	"bufio"
	"bytes"
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

const crashChildEnv = "CACHECAST_STORE_CRASH_CHILD"

// crashSize is the value size of message seq in the crash test: it varies,
// so that records straddle pages and segment ends differently.
func crashSize(seq uint64) int { return 50 + int(seq*7919%3000) }

// crashChild is the body of the child process: it appends under sync
// flush forever and prints each acknowledged seq. The parent kills it.
func crashChild() {
	o := DefaultOptions(os.Getenv(crashChildEnv))
	o.SegmentSize = 64 << 10
	o.IndexChunkEntries = 1024
	o.Flush = FlushSync
	s, err := Open(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	out := os.Stdout // unbuffered: a line written is a line the parent gets
	fmt.Fprintln(out, "ready")
	for {
		seq := s.nextSeq
		m := record.Message{Topic: "crash", Key: strconv.FormatUint(seq%97, 10), Value: value(int(seq), crashSize(seq))}
		res, err := s.Publish(&m)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child publish:", err)
			os.Exit(4)
		}
		fmt.Fprintln(out, res.Seq)
	}
}

// TestCrashSIGKILL kills a writing child process at random moments, at
// least 50 times, and checks after each kill that every acknowledged
// record is in the log byte for byte, that the log holds nothing it should
// not, and that appending goes on.
func TestCrashSIGKILL(t *testing.T) {
	rounds := 50
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	dir := t.TempDir()
	var acked uint64
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
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

		o := testOptions(t, dir)
		s, err := Open(o)
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		recs := readAll(t, s) // checks seqs are 1..n without a gap
		if uint64(len(recs)) < acked {
			t.Fatalf("round %d: %d records after the crash, %d were acknowledged", round, len(recs), acked)
		}
		for i, r := range recs {
			seq := uint64(i + 1)
			if !bytes.Equal(r.Value(), value(int(seq), crashSize(seq))) {
				t.Fatalf("round %d: record %d is not what was written", round, seq)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
	}
	if acked < uint64(rounds) {
		t.Fatalf("only %d writes acknowledged in %d rounds", acked, rounds)
	}
	t.Logf("%d rounds, %d writes acknowledged", rounds, acked)
}
