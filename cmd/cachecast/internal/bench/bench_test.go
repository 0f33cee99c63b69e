package bench

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Run itself is tested through the command (cmd/cachecast TestBench),
// against clienttest's double of the daemon.

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i))
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500}, {0.99, 990}, {0.999, 999}, {1, 1000}, {0, 1}} {
		if got := percentile(d, tt.q); got != tt.want {
			t.Errorf("percentile(%v) = %d, want %d", tt.q, got, tt.want)
		}
	}
	if percentile(nil, 0.5) != 0 || percentile([]time.Duration{7}, 0.999) != 7 {
		t.Error("percentile of short lists")
	}
}

func TestProgress(t *testing.T) {
	if got := bar(50, 100, 10); got != "[=====     ]  50%" {
		t.Errorf("bar: %q", got)
	}
	if got := bar(150, 100, 4); got != "[====] 100%" {
		t.Errorf("bar over total: %q", got)
	}
	for _, tty := range []bool{false, true} {
		var errOut bytes.Buffer
		var done atomic.Int64
		done.Store(40)
		stop := startProgress(Options{Progress: &errOut, ProgressTTY: tty}, "x", 100, &done)
		time.Sleep(1100 * time.Millisecond)
		stop()
		stop()
		s := errOut.String()
		if tty && (!strings.Contains(s, "\rx [============") || !strings.HasSuffix(s, "\r\033[K")) {
			t.Errorf("tty progress %q", s)
		}
		if !tty && !strings.Contains(s, "x: 40/100 messages (40%)") {
			t.Errorf("line progress %q", s)
		}
	}
}

func TestFmtMicros(t *testing.T) {
	for us, want := range map[float64]string{12.34: "12.3µs", 999.9: "999.9µs", 1500: "1.50ms", 2.5e6: "2.50s"} {
		if got := fmtMicros(us); got != want {
			t.Errorf("fmtMicros(%v) = %q, want %q", us, got, want)
		}
	}
}
