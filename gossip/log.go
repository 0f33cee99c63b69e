package gossip

import (
	"bytes"
	"log"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newStdLogger returns the *log.Logger handed to memberlist: its lines go
// to zap at the level memberlist wrote in them.
func newStdLogger(z *zap.Logger) *log.Logger {
	return log.New(&logWriter{log: z}, "", 0)
}

// logWriter parses memberlist's "[LEVEL] memberlist: message" lines into
// zap entries. A *log.Logger calls Write once per line, serialised, so
// the writer keeps no state.
type logWriter struct {
	log *zap.Logger
}

// Write logs each line of p. It never fails, so that memberlist never sees
// an error from its logger.
func (w *logWriter) Write(p []byte) (int, error) {
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
