package systemd

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/daemon"
)

// TestEnvExampleCoversDaemonFlags checks the example against the daemon's
// real flags: every flag's variable is there with the flag's default (or,
// where the unit sets it, the unit's value), and nothing else is.
func TestEnvExampleCoversDaemonFlags(t *testing.T) {
	vars := exampleEnv(t)
	unitEnv := parseUnit(t, readFile(t, unitFile)).env()
	fs := pflag.NewFlagSet("cachecastd", pflag.ContinueOnError)
	cfg := daemon.DefaultConfig()
	cfg.AddFlags(fs)
	known := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		name := daemon.EnvName(f.Name)
		known[name] = true
		got, ok := vars[name]
		switch {
		case !ok:
			t.Errorf("%s lacks %s (--%s, default %q)", envExample, name, f.Name, f.DefValue)
		case unitEnv[name] != "":
			if got != unitEnv[name] {
				t.Errorf("%s=%q, the unit sets %q", name, got, unitEnv[name])
			}
		case f.Name == "node-name":
			// The default is the host name: shown empty, explained in a comment.
			if got != "" {
				t.Errorf("%s=%q, want it empty (the default is the host name)", name, got)
			}
		case f.Value.Type() == "stringSlice" && f.DefValue == "[]":
			// pflag shows an empty list as "[]"; in the file it is empty.
			if got != "" {
				t.Errorf("%s=%q, want it empty (the default is an empty list)", name, got)
			}
		case f.Value.Type() == "durationSlice":
			// pflag shows a list in brackets; in the file it is bare.
			if want := strings.Trim(f.DefValue, "[]"); got != want {
				t.Errorf("%s=%q, but the default of --%s is %q", name, got, f.Name, want)
			}
		case got != f.DefValue:
			t.Errorf("%s=%q, but the default of --%s is %q", name, got, f.Name, f.DefValue)
		}
	})
	for name := range vars {
		if !known[name] {
			t.Errorf("%s has %s, which no cachecastd flag reads", envExample, name)
		}
	}
}
