package gossip

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestLogWriter(t *testing.T) {
	tests := []struct {
		line string
		lvl  zapcore.Level
		msg  string
	}{
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:5000\n", zapcore.DebugLevel, "Stream connection from=127.0.0.1:5000"},
		{"[TRACE] memberlist: tick", zapcore.DebugLevel, "tick"},
		{"[INFO] memberlist: Marking n2 as failed, suspect timeout reached (0 peer confirmations)\n", zapcore.InfoLevel, "Marking n2 as failed, suspect timeout reached (0 peer confirmations)"},
		{"[WARN] memberlist: Was able to connect to n3 over TCP but UDP probes failed\n", zapcore.WarnLevel, "Was able to connect to n3 over TCP but UDP probes failed"},
		{"[ERR] memberlist: Failed to push/pull merge: Encryption is configured but remote state is not encrypted from=127.0.0.1:1\n", zapcore.ErrorLevel, "Failed to push/pull merge: Encryption is configured but remote state is not encrypted from=127.0.0.1:1"},
		{"[ERROR] memberlist: Failed to encrypt local state: x\n", zapcore.ErrorLevel, "Failed to encrypt local state: x"},
		{"[ERR] Failed to shutdown transport: boom\n", zapcore.ErrorLevel, "Failed to shutdown transport: boom"},
		{"no level at all\n", zapcore.InfoLevel, "no level at all"},
		{"[NOTALEVEL] memberlist: odd\n", zapcore.InfoLevel, "[NOTALEVEL] memberlist: odd"},
		{"[", zapcore.InfoLevel, "["},
	}
	for _, tt := range tests {
		core, logs := observer.New(zapcore.DebugLevel)
		l := newStdLogger(&logWriter{log: zap.New(core)})
		l.Print(tt.line)
		entries := logs.AllUntimed()
		if len(entries) != 1 {
			t.Fatalf("%q: %d entries", tt.line, len(entries))
		}
		if e := entries[0]; e.Level != tt.lvl || e.Message != tt.msg {
			t.Errorf("%q: got %v %q, want %v %q", tt.line, e.Level, e.Message, tt.lvl, tt.msg)
		}
	}

	// Two lines in one write give two entries; blank lines none.
	core, logs := observer.New(zapcore.DebugLevel)
	w := &logWriter{log: zap.New(core)}
	in := []byte("[WARN] memberlist: a\n\n[INFO] memberlist: b\n")
	if n, err := w.Write(in); err != nil || n != len(in) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if got := logs.AllUntimed(); len(got) != 2 || got[0].Message != "a" || got[1].Level != zapcore.InfoLevel {
		t.Fatalf("entries: %+v", got)
	}
}

func TestLogWriterStopped(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	w := &logWriter{log: zap.New(core)}
	l := newStdLogger(w)
	l.Print("[INFO] memberlist: before")
	w.stopped.Store(true)
	l.Print("[INFO] memberlist: after")
	if got := logs.AllUntimed(); len(got) != 1 || got[0].Message != "before" {
		t.Fatalf("logged %v, want only the line before the stop", got)
	}
}
