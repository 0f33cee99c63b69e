package config

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

var update = flag.Bool("update", false, "rewrite testdata/flags.txt from the flags")

// TestFlagsUnchanged compares every flag's name, type, default and
// environment variable with testdata/flags.txt, so that a change to the
// set of settings is a deliberate one (go test -run TestFlagsUnchanged
// -update rewrites the file): operators' command lines, env files and
// systemd drop-ins name them.
func TestFlagsUnchanged(t *testing.T) {
	fs := pflag.NewFlagSet("cachecastd", pflag.ContinueOnError)
	cfg := Default()
	cfg.NodeName = "" // the host name: not the same on every machine
	cfg.AddFlags(fs)
	var b strings.Builder
	fs.VisitAll(func(f *pflag.Flag) {
		fmt.Fprintf(&b, "--%s %s %q $%s\n", f.Name, f.Value.Type(), f.DefValue, EnvName(f.Name))
	})
	const golden = "testdata/flags.txt"
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("the flags differ from %s (go test -run TestFlagsUnchanged -update, if meant):\n got: %s\nwant: %s", golden, got, want)
	}
}
