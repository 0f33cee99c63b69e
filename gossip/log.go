package gossip

import (
	"bytes"
	"log"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newStdLogger returns the *log.Logger handed to memberlist: its lines go
// to zap at the level memberlist wrote in them.
func newStdLogger(w *logWriter) *log.Logger {
	return log.New(w, "", 0)
}

// logWriter parses memberlist's "[LEVEL] memberlist: message" lines into
// zap entries. A *log.Logger calls Write once per line, serialised.
// memberlist's probe and gossip goroutines can still run for a moment
// after its Shutdown returns; once stopped, the writer drops their lines,
// so that nothing logs after Gossip.Shutdown (a test's logger, say, is
// gone by then).
type logWriter struct {
	log     *zap.Logger
	stopped atomic.Bool
}

// Write logs each line of p. It never fails, so that memberlist never sees
// an error from its logger.
func (w *logWriter) Write(p []byte) (int, error) {
	if w.stopped.Load() {
		return len(p), nil
	}
	for _, line := range bytes.Split(p, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		lvl, msg := parseLogLine(string(line))
		if ce := w.log.Check(lvl, msg); ce != nil {
			ce.Write()
		}
	}
	return len(p), nil
}

// parseLogLine splits a memberlist log line into a zap level and the
// message without the level tag and the "memberlist: " prefix. A line
// without a known tag is logged at info.
func parseLogLine(s string) (zapcore.Level, string) {
	s = strings.TrimSpace(s)
	lvl := zapcore.InfoLevel
	if strings.HasPrefix(s, "[") {
		if end := strings.IndexByte(s, ']'); end > 0 {
			if l, ok := logLevels[strings.ToUpper(s[1:end])]; ok {
				lvl = l
				s = strings.TrimSpace(s[end+1:])
			}
		}
	}
	s = strings.TrimPrefix(s, "memberlist: ")
	return lvl, s
}

var logLevels = map[string]zapcore.Level{
	"TRACE":   zapcore.DebugLevel,
	"DEBUG":   zapcore.DebugLevel,
	"INFO":    zapcore.InfoLevel,
	"WARN":    zapcore.WarnLevel,
	"WARNING": zapcore.WarnLevel,
	"ERR":     zapcore.ErrorLevel,
	"ERROR":   zapcore.ErrorLevel,
}
