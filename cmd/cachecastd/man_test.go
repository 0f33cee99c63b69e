package main

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/internal/testkit"
)

// manFlagRE finds the flags a page documents: the tags of its options.
var manFlagRE = regexp.MustCompile(`(?m)^(?:\\fB\\-[A-Za-z]\\fR, )?\\fB\\-\\-([a-z0-9\\-]+)\\fR`)

// TestManPageListsEveryFlag holds cachecastd(8) to the flags: the page
// documents every flag the daemon parses (those other issues add too),
// with its environment variable, and no other; groff reads it without a
// warning.
func TestManPageListsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--man"}, noEnv, &out, tempStderr(t)); code != exitOK {
		t.Fatalf("--man exit %d", code)
	}
	page := out.String()
	var documented []string
	for _, m := range manFlagRE.FindAllStringSubmatch(page, -1) {
		documented = append(documented, strings.ReplaceAll(m[1], `\-`, "-"))
	}
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	cfg := config.Default()
	cfg.AddFlags(fs)
	want := []string{"help", "version"}
	fs.VisitAll(func(f *pflag.Flag) {
		want = append(want, f.Name)
		if !bytes.Contains(out.Bytes(), []byte("[$"+config.EnvName(f.Name)+"]")) {
			t.Errorf("cachecastd(8) does not name %s for --%s", config.EnvName(f.Name), f.Name)
		}
	})
	slices.Sort(want)
	slices.Sort(documented)
	if !slices.Equal(documented, want) {
		t.Errorf("cachecastd(8) documents the flags\n%q\nthe daemon has\n%q", documented, want)
	}
	if len(want) < 50 {
		t.Fatalf("only %d flags: the test is not looking at the daemon's flag set", len(want))
	}
	testkit.LintMan(t, page)
}
