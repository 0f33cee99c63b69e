package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const mib = 1 << 20

// TestGCPercent: the percent gives the rule's headroom, max(min(live,
// Floor), Percent of live), and never less than Percent: a heap up to
// Floor live collects as at GOGC=100, never later.
func TestGCPercent(t *testing.T) {
	for _, c := range []struct {
		name string
		rule Rule
		live uint64
		want int
	}{
		{"large heap: the fraction", Default, 214e6, 60},
		{"past the knee (106.7 MiB): the fraction", Default, 128 * mib, 60},
		{"below the knee: the floor", Default, 100 * mib, 64},
		{"at the floor: GOGC=100", Default, 64 * mib, 100},
		{"just past the floor: the floor", Default, 65 * mib, 99},
		{"small heap: GOGC=100, not the floor (640)", Default, 10 * mib, 100},
		{"tiny heap: GOGC=100", Default, 2 * mib, 100},
		{"nothing marked yet: GOGC=100", Default, 0, 100},
		{"no floor: the fraction", Rule{Percent: 50}, 1 << 30, 50},
		{"no floor, nothing marked yet: the fraction", Rule{Percent: 50}, 0, 50},
		{"no floor, tiny heap: never below the fraction", Rule{Percent: 50}, 1 * mib, 50},
		{"rounded up: at least the floor", Rule{Floor: 64 * mib, Percent: 25}, 3 * 64 * mib, 34},
		{"GOGC=100's rule", Rule{Floor: 4 * mib, Percent: 100}, 1 << 30, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := c.rule.GCPercent(c.live)
			if got != c.want {
				t.Fatalf("Rule%+v.GCPercent(%d) = %d, want %d", c.rule, c.live, got, c.want)
			}
		})
	}
}

// TestOperator: a GOGC the runtime reads (a number, off) is the
// operator's and wins; an empty or absent one is not.
func TestOperator(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"GOGC": ""}, false},
		{map[string]string{"GOMEMLIMIT": "1GiB"}, false},
		{map[string]string{"GOGC": "50"}, true},
		{map[string]string{"GOGC": "off", "GOMEMLIMIT": "1GiB"}, true},
	} {
		lookup := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
		if got := Operator(lookup); got != c.want {
			t.Errorf("Operator(%v) = %v, want %v", c.env, got, c.want)
		}
	}
}

// gogc is the runtime's current GOGC percent.
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// TestTunerAfterEachCycle: Start applies the rule at once and again
// after each collection (a percent set meanwhile is replaced), Stop
// restores the percent it found and tunes no more.
func TestTunerAfterEachCycle(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	rule := Rule{Percent: 37} // no floor: 37 at any live heap
	tu := Start(rule)
	defer tu.Stop()
	if got := gogc(); got != 37 {
		t.Fatalf("GOGC after Start = %d, want 37", got)
	}
	for cycle := range 3 {
		debug.SetGCPercent(80)
		n := tu.cycles.Load()
		runtime.GC()
		waitFor(t, func() bool { return tu.cycles.Load() > n })
		if got := gogc(); got != 37 {
			t.Fatalf("cycle %d: GOGC = %d, want the rule's 37", cycle, got)
		}
	}
	tu.Stop()
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC after Stop = %d, want 100 (the percent before Start)", got)
	}
	n := tu.cycles.Load()
	runtime.GC() // the cleanup armed before Stop may run: it must change nothing
	runtime.GC()
	if got, m := gogc(), tu.cycles.Load(); got != 100 || m != n {
		t.Fatalf("after Stop and a cycle: GOGC = %d, tuned %d times more; want 100, none", got, m-n)
	}
}

// waitFor waits until ok, for at most a minute (a busy machine).
func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !ok(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within a minute")
		}
		runtime.GC() // the cleanup may wait for a later cycle's sweep
		time.Sleep(time.Millisecond)
	}
}
