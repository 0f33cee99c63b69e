package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: the console log's colour is for
// terminals only, so the test needs a real one.
func openPTY(t *testing.T) (master, term *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("the pty's number: %v", err)
	}
	term, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { term.Close() })
	if !IsTerminal(term) {
		t.Fatal("the pty is not a terminal")
	}
	return master, term
}

// The console log, on a real terminal: every line starts with a date and
// time; the level is coloured unless NO_COLOR is set and not empty
// (https://no-color.org).
func TestConsoleLog(t *testing.T) {
	stamp := regexp.MustCompile(`^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3} [+-]\d{4}\t`)
	tests := []struct {
		name    string
		noColor *string // nil: unset
		colour  bool
	}{
		{"NO_COLOR unset", nil, true},
		{"NO_COLOR empty", new(""), true},
		{"NO_COLOR=1", new("1"), false},
		{"NO_COLOR=false", new("false"), false}, // any non-empty value
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.noColor == nil {
				t.Setenv("NO_COLOR", "")
				os.Unsetenv("NO_COLOR")
			} else {
				t.Setenv("NO_COLOR", *tt.noColor)
			}
			master, term := openPTY(t)
			log, err := NewLogger("", term) // a terminal: console
			if err != nil {
				t.Fatal(err)
			}
			log.Info("hello")
			_ = master.SetReadDeadline(time.Now().Add(5 * time.Second))
			var got []byte
			buf := make([]byte, 4096)
			for !bytes.Contains(got, []byte("hello")) {
				n, err := master.Read(buf)
				if err != nil {
					t.Fatalf("reading the terminal: %v (got %q)", err, got)
				}
				got = append(got, buf[:n]...)
			}
			if !stamp.Match(got) {
				t.Errorf("line %q does not start with a date and time", got)
			}
			if esc := bytes.Contains(got, []byte("\x1b[")); esc != tt.colour {
				t.Errorf("line %q: colour %v; want %v", got, esc, tt.colour)
			}
		})
	}
}

// A console log that is not a terminal has no colour either.
func TestConsoleLogFile(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log, err := NewLogger("console", f)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello")
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(got, []byte("\x1b[")) || !regexp.MustCompile(`^\d{4}-\d{2}-\d{2} `).Match(got) {
		t.Errorf("console log in a file: %q", got)
	}
}

// A log line that cannot be written (here: a pipe without a reader) is
// dropped and counted, and the first one noted once; the writer reports
// success, so zap does not write the error into the same broken file.
func TestLogOutputBrokenPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer w.Close()
	lostNoted.Store(false)
	var notes []error
	out := &logOutput{f: w, note: func(err error) { notes = append(notes, err) }}
	before := lostLogLines.Load()
	for range 3 {
		if n, err := out.Write([]byte("line\n")); n != 5 || err != nil {
			t.Fatalf("Write = %d, %v; want 5, nil", n, err)
		}
	}
	if got := lostLogLines.Load() - before; got != 3 {
		t.Fatalf("%d lines counted lost; want 3", got)
	}
	if len(notes) != 1 || !errors.Is(notes[0], syscall.EPIPE) {
		t.Fatalf("notes %v; want one EPIPE", notes)
	}
	if err := out.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}
