package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestDocsCommands checks docs/cli.md's table of the CLI's
// commands against the code: every command has a row, and its row names
// each of the command's own flags; the flags every command takes are
// named above the table.
func TestDocsCommands(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `") {
			rows = append(rows, line)
		}
	}
	e := &env{getenv: func(string) string { return "" }}
	global := pflag.NewFlagSet("cachecast", pflag.ContinueOnError)
	var g globals
	g.register(global, e)
	_, every, _ := strings.Cut(string(b), "Every command takes ")
	every, _, _ = strings.Cut(every, "\n\n")
	global.VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(every, "`--"+f.Name+"`") {
			t.Errorf("docs/cli.md does not say that every command takes --%s", f.Name)
		}
	})
	for _, cmd := range commands {
		row := ""
		for _, r := range rows {
			cell, _, _ := strings.Cut(strings.TrimPrefix(r, "| "), " |")
			if strings.Contains(cell, "`"+cmd.name+"`") || strings.Contains(cell, "`"+cmd.name+" ") {
				row = r
				break
			}
		}
		if row == "" {
			t.Errorf("docs/cli.md's table of commands has no row for %s", cmd.name)
			continue
		}
		fs := newFlagSet(cmd)
		cmd.setup(fs, &g)
		fs.VisitAll(func(f *pflag.Flag) {
			if !strings.Contains(row, "`--"+f.Name+"`") {
				t.Errorf("docs/cli.md's row for %s does not name --%s", cmd.name, f.Name)
			}
		})
	}
}
