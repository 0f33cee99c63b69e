package daemon

import (
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/coreos/go-systemd/v22/journal"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// consoleTimeLayout is the console log's time: a date, to the millisecond,
// in the local zone (the one a person reading a terminal is in).
const consoleTimeLayout = "2006-01-02 15:04:05.000 -0700"

// noColor reports whether NO_COLOR asks for no colour: set and not empty
// (https://no-color.org).
func noColor(lookup func(string) (string, bool)) bool {
	v, ok := lookup("NO_COLOR")
	return ok && v != ""
}

// NewLogger builds the logger of cmd/cachecastd, writing to w: format "json"
// (one object a line, for journald and log shippers) or "console" (for
// people: dated lines, the level in colour on a terminal unless NO_COLOR is
// set); empty picks console when w is a terminal and json otherwise. The
// logger lets every level through: the daemon filters it by --log-level, so
// that SIGHUP can change the level.
//
// A log that cannot be written never stops the node: NewLogger ignores
// SIGPIPE for the whole process (otherwise the Go runtime exits at the
// first write to a broken stdout or stderr, as under `cachecastd | head`),
// and a line that fails to write is dropped and counted
// (cachecast_log_lines_lost_total), with one note to journald when it runs.
func NewLogger(format string, w *os.File) (*zap.Logger, error) {
	if format == "" {
		format = "json"
		if IsTerminal(w) {
			format = "console"
		}
	}
	var enc zapcore.Encoder
	switch format {
	case "json":
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout(consoleTimeLayout)
		if IsTerminal(w) && !noColor(os.LookupEnv) {
			ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("--log-format: must be \"json\" or \"console\", got %q", format)
	}
	signal.Ignore(syscall.SIGPIPE)
	out := zapcore.Lock(&logOutput{f: w, note: noteToJournal})
	core := zapcore.NewCore(enc, out, zapcore.DebugLevel)
	return zap.New(core, zap.ErrorOutput(out)), nil
}

// lostLogLines counts log lines that could not be written, over the
// process (the log output is the process's stderr).
var lostLogLines atomic.Uint64

// logOutput is the log's file. A failed write (a closed pipe, a full disk)
// drops the line, counts it, and the first one of the process is noted
// with note. It reports success to zap, which would otherwise write the
// error to the same broken file.
type logOutput struct {
	f    *os.File
	note func(err error)
}

// lostNoted makes the note once a process.
var lostNoted atomic.Bool

func (o *logOutput) Write(p []byte) (int, error) {
	if _, err := o.f.Write(p); err != nil {
		lostLogLines.Add(1)
		if !lostNoted.Swap(true) {
			o.note(err)
		}
	}
	return len(p), nil
}

func (o *logOutput) Sync() error {
	_ = o.f.Sync() // a pipe or a terminal cannot sync: nothing to report
	return nil
}

// noteToJournal tells journald, when it runs, that log lines are being
// lost: the one place such a note can still be read.
func noteToJournal(err error) {
	if !journal.Enabled() {
		return
	}
	_ = journal.Send(fmt.Sprintf("cachecastd: writing the log failed (%v): log lines that cannot be written are dropped, counted in cachecast_log_lines_lost_total", err),
		journal.PriWarning, map[string]string{"SYSLOG_IDENTIFIER": "cachecastd"})
}

// levelCore filters a core by a level that can change while the daemon runs
// (SIGHUP). The wrapped core's own level still applies, so a logger built at
// info never shows debug lines.
type levelCore struct {
	zapcore.Core
	level zap.AtomicLevel
}

func (c levelCore) Enabled(l zapcore.Level) bool {
	return c.level.Enabled(l) && c.Core.Enabled(l)
}

func (c levelCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !c.level.Enabled(e.Level) {
		return ce
	}
	return c.Core.Check(e, ce)
}

func (c levelCore) With(fields []zapcore.Field) zapcore.Core {
	return levelCore{c.Core.With(fields), c.level}
}
