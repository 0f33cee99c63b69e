package daemon

import (
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// parseLevel reads --log-level. Only the four levels an operator sets are
// accepted; zap's panic levels are not a verbosity.
func parseLevel(s string) (zapcore.Level, error) {
	switch s {
	case "debug":
		return zapcore.DebugLevel, nil
	case "info":
		return zapcore.InfoLevel, nil
	case "warn":
		return zapcore.WarnLevel, nil
	case "error":
		return zapcore.ErrorLevel, nil
	}
	return 0, fmt.Errorf("--log-level: must be debug, info, warn or error, got %q", s)
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// NewLogger builds the logger of cmd/cachecastd, writing to w: format "json"
// (one object a line, for journald and log shippers) or "console" (for
// people); empty picks console when w is a terminal and json otherwise. The
// logger lets every level through: the daemon filters it by --log-level, so
// that SIGHUP can change the level.
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
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		if IsTerminal(w) {
			ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("--log-format: must be \"json\" or \"console\", got %q", format)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(w), zapcore.DebugLevel)
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(w))), nil
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
