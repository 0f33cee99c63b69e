package systemd

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/daemon/config"
	"github.com/spf13/pflag"
)

var update = flag.Bool("update", false, "rewrite the generated table of docs/configuration.md")

// Markers of the generated part of docs/configuration.md.
const (
	tableBegin = "<!-- every flag: generated from daemon/config/settings.go by `go test ./systemd -run TestDocsFlagTable -update` -->\n"
	tableEnd   = "<!-- end of every flag -->\n"
)

// TestDocsFlagTable checks the table of every flag in
// docs/configuration.md against the daemon's table of settings: the
// flag, its environment variable, its default, whether SIGHUP applies it,
// and its help, in the order of --help. With -update it rewrites it.
func TestDocsFlagTable(t *testing.T) {
	const path = "../docs/configuration.md"
	doc := readFile(t, path)
	before, rest, ok := strings.Cut(doc, tableBegin)
	_, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok || !ok2 {
		t.Fatalf("%s lacks the markers of its generated table:\n%s%s", path, tableBegin, tableEnd)
	}
	want := flagTable()
	if *update {
		if err := os.WriteFile(path, []byte(before+tableBegin+want+tableEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got, _, _ := strings.Cut(rest, tableEnd); got != want {
		t.Errorf("%s: the table of every flag is not the settings' (go test ./systemd -run TestDocsFlagTable -update):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

// flagTable is the Markdown table of the daemon's flags.
func flagTable() string {
	fs := pflag.NewFlagSet("cachecastd", pflag.ContinueOnError)
	fs.SortFlags = false
	cfg := config.Default()
	cfg.NodeName = "" // the host name
	cfg.AddFlags(fs)
	reload := config.ReloadFlags()
	var b strings.Builder
	b.WriteString("| flag | environment | default | SIGHUP | what |\n|---|---|---|---|---|\n")
	fs.VisitAll(func(f *pflag.Flag) {
		env := config.EnvName(f.Name)
		def := f.DefValue
		switch {
		case f.Name == "node-name":
			def = "the host name"
		case def == "" || def == "[]":
			def = "empty"
		default:
			def = "`" + strings.Trim(def, "[]") + "`"
		}
		hup := ""
		if slices.Contains(reload, f.Name) {
			hup = "applied"
		}
		help := strings.TrimSuffix(f.Usage, " [$"+env+"]")
		help = strings.TrimSuffix(help, " (reloaded on SIGHUP)")
		help = strings.ReplaceAll(help, "|", "\\|")
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s | %s |\n", f.Name, env, def, hup, help)
	})
	return b.String()
}
