package systemd

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/daemon/config"
	"github.com/spf13/pflag"
)

// TestEnvExampleCoversDaemonFlags checks the example against the daemon's
// real flags: every flag's variable is there with the flag's default (or,
// where the unit sets it, the unit's value), and nothing else is.
func TestEnvExampleCoversDaemonFlags(t *testing.T) {
	vars := exampleEnv(t)
	unitEnv := parseUnit(t, readFile(t, unitFile)).env()
	fs := pflag.NewFlagSet("cachecastd", pflag.ContinueOnError)
	cfg := config.Default()
	cfg.AddFlags(fs)
	known := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		name := config.EnvName(f.Name)
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

// TestDocsDaemonFlags checks docs/configuration.md against the daemon's
// real flags: it names every flag, and where it writes a default after
// the name ("`--flush-interval` (100ms)") outside the CLI's section, that
// default is the flag's.
// The words in the brackets count as a default when they parse as the
// flag's type (a size, a duration, a number, a word in backquotes); a
// remark ("(ip[:port]; empty: ...)") is passed over.
func TestDocsDaemonFlags(t *testing.T) {
	readme := readFile(t, "../docs/configuration.md")
	// The CLI's section has flags of its own that share names with the
	// daemon's (--transport, --view-file): its defaults are not these.
	daemonPart := readme
	if before, rest, ok := strings.Cut(readme, "\n## The same with the CLI\n"); ok {
		_, after, _ := strings.Cut(rest, "\n## ")
		daemonPart = before + "\n## " + after
	}
	daemonFlags(func(f *pflag.Flag) {
		named := regexp.MustCompile("--" + regexp.QuoteMeta(f.Name) + "(?:[^a-z0-9-]|$)")
		if !named.MatchString(readme) {
			t.Errorf("docs/configuration.md does not name --%s (default %q)", f.Name, f.DefValue)
		}
	})
	checkDefaultsSaid(t, "docs/configuration.md", daemonPart)
}

// TestDocsDefaultsSaid checks the defaults README.md and the pages of
// docs/ write beside a daemon flag's name, as "`--flag` (default" or
// "`--flag`, default", against the flag's: a default changed in the
// settings table fails here until the prose says the new one. docs/cli.md
// is left out: the CLI's flags share names with the daemon's (--view-file)
// but not their defaults; docs/configuration.md has its own test above.
func TestDocsDefaultsSaid(t *testing.T) {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(pages, "../README.md", "../DESIGN.md", "../ARCHITECTURE.md") {
		if name := filepath.Base(p); name == "cli.md" || name == "configuration.md" {
			continue
		}
		checkDefaultsSaid(t, strings.TrimPrefix(p, "../"), readFile(t, p))
	}
}

// daemonFlags calls fn with each of cachecastd's flags but --help and
// --version, defaults set.
func daemonFlags(fn func(f *pflag.Flag)) {
	fs := pflag.NewFlagSet("cachecastd", pflag.ContinueOnError)
	cfg := config.Default()
	cfg.AddFlags(fs)
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" && f.Name != "version" {
			fn(f)
		}
	})
}

// checkDefaultsSaid fails t for each default text (the file name) writes
// beside a daemon flag's name that is not the flag's.
func checkDefaultsSaid(t *testing.T, name, text string) {
	t.Helper()
	daemonFlags(func(f *pflag.Flag) {
		withDefault := regexp.MustCompile("`--" + regexp.QuoteMeta(f.Name) + "`(?: \\(|, )([^;)]*)")
		for _, m := range withDefault.FindAllStringSubmatch(text, -1) {
			if strings.HasPrefix(m[1], "`") {
				continue // another flag's name: "`--a`, `--b`"
			}
			said, ok := readmeDefault(f, m[1])
			if said == "off" && (f.DefValue == "" || f.DefValue == "off") {
				continue // "off": the door or port is not opened by default
			}
			if ok && said != normalDefault(f, f.DefValue) {
				t.Errorf("%s gives --%s the default %q; the flag's is %q", name, f.Name, m[1], f.DefValue)
			}
		}
	})
}

// readmeDefault reads the words README.md writes after a flag's name as
// a default of f's type, in normalDefault's form; ok is false when they
// are a remark, not a default.
func readmeDefault(f *pflag.Flag, words string) (string, bool) {
	w := strings.TrimPrefix(strings.TrimSpace(words), "default ")
	if i := strings.Index(w, ": "); i >= 0 {
		w = w[:i] // "`auto`: beside the socket"
	}
	w = strings.Trim(w, "`")
	if w == "empty" {
		w = ""
	}
	switch f.Value.Type() {
	case "string":
		if strings.ContainsAny(w, " []") {
			return "", false
		}
		return w, true
	case "mode":
		return w, true
	case "size", "duration", "durationSlice", "int":
		return normalDefault(f, w), normalDefault(f, w) != ""
	}
	return "", false // a bool, a list: no default to compare
}

// normalDefault is a default written v in one form, so that "1 MiB" and
// "1MiB", "100,000" and "100000", "1m" and "1m0s" compare equal; empty
// when v does not parse as f's type.
func normalDefault(f *pflag.Flag, v string) string {
	v = strings.ReplaceAll(v, " ", "")
	switch f.Value.Type() {
	case "size":
		n, err := config.ParseSize(v)
		if err != nil {
			return ""
		}
		return strconv.FormatInt(n, 10)
	case "duration":
		d, err := time.ParseDuration(v)
		if err != nil {
			return ""
		}
		return d.String()
	case "durationSlice":
		var out []string
		for _, s := range strings.Split(strings.Trim(v, "[]"), ",") {
			d, err := time.ParseDuration(s)
			if err != nil {
				return ""
			}
			out = append(out, d.String())
		}
		return strings.Join(out, ",")
	case "int":
		n, err := strconv.Atoi(strings.ReplaceAll(v, ",", ""))
		if err != nil {
			return ""
		}
		return strconv.Itoa(n)
	}
	return v
}
