package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/internal/manpage"
	"github.com/cachecast/cachecast/internal/testkit"
)

var noenv = &env{getenv: func(string) string { return "" }}

// everyCommandFlag calls f with each command and each flag it parses
// (the flags every command takes included).
func everyCommandFlag(t *testing.T, f func(c *command, fl *pflag.Flag)) {
	t.Helper()
	n := 0
	for _, c := range commands {
		commandFlags(c, noenv).VisitAll(func(fl *pflag.Flag) { n++; f(c, fl) })
	}
	if len(commands) < 20 || n < 100 {
		t.Fatalf("%d commands, %d flags: the test is not looking at the table", len(commands), n)
	}
}

// section is the part of a page from the item of c to the next command's.
func section(page string, c *command) string {
	_, rest, ok := strings.Cut(page, ".TP\n\\fB"+manpage.Escape("cachecast "+c.name+" [flags]"))
	if !ok {
		return ""
	}
	s, _, _ := strings.Cut(rest, ".TP\n\\fBcachecast ")
	return s
}

// TestManPageListsEveryCommand holds cachecast(1) to the table of
// commands: every command has its item, every flag of it is documented
// there or among the flags every command takes, and groff reads the page
// without a warning.
func TestManPageListsEveryCommand(t *testing.T) {
	r := cli(t, nil, "", "--man").check(t, exitOK)
	page := r.stdout
	global, _, _ := strings.Cut(page, `.SH "COMMANDS"`)
	everyCommandFlag(t, func(c *command, f *pflag.Flag) {
		tag := ".TP\n\\fB\\-\\-" + manpage.Escape(f.Name) + "\\fR"
		if f.Shorthand != "" {
			tag = ".TP\n\\fB\\-" + f.Shorthand + "\\fR, \\fB\\-\\-" + manpage.Escape(f.Name) + "\\fR"
		}
		s := section(page, c)
		switch {
		case s == "":
			t.Errorf("cachecast(1) has no item for the command %s", c.name)
		case !strings.Contains(s, tag) && !strings.Contains(global, tag):
			t.Errorf("cachecast(1) does not document --%s of %s", f.Name, c.name)
		}
	})
	if strings.Contains(page, "\\-\\-man") {
		t.Error("cachecast(1) shows the hidden --man")
	}
	testkit.LintMan(t, page)
}

// TestCompletionListsEveryCommand holds the three scripts to the table:
// each names every command's words and every flag.
func TestCompletionListsEveryCommand(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		script := cli(t, nil, "", "completion", shell).check(t, exitOK).stdout
		everyCommandFlag(t, func(c *command, f *pflag.Flag) {
			for _, w := range strings.Fields(c.name) {
				if !strings.Contains(script, w) {
					t.Errorf("%s completion lacks the command %s", shell, c.name)
				}
			}
			// Each shell names a flag its own way: --name (bash), '--name:usage'
			// (zsh), -l name (fish).
			if !strings.Contains(script, "--"+f.Name+" ") && !strings.Contains(script, "'--"+f.Name+":") && !strings.Contains(script, "-l "+f.Name+" ") {
				t.Errorf("%s completion lacks --%s of %s", shell, f.Name, c.name)
			}
		})
	}
	r := cli(t, nil, "", "completion", "tcsh").check(t, exitUsage)
	if !strings.Contains(r.stderr, `"tcsh"`) {
		t.Errorf("completion tcsh: %q", r.stderr)
	}
}

// writeScript writes the completion script for shell to a file.
func writeScript(t *testing.T, shell string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cachecast."+shell)
	if err := os.WriteFile(p, []byte(cli(t, nil, "", "completion", shell).check(t, exitOK).stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// completions are command lines typed so far, the word under the cursor
// last, with what a shell must offer: all of want, none of not.
var completions = []struct {
	line      []string
	want, not []string
}{
	{[]string{"cachecast", ""}, []string{"publish", "dlq", "completion", "help"}, []string{"list"}},
	{[]string{"cachecast", "dl"}, []string{"dlq"}, []string{"del"}},
	{[]string{"cachecast", "dlq", ""}, []string{"list", "show", "replay"}, []string{"publish"}},
	{[]string{"cachecast", "--socket", "/s", "dlq", "list", "--"}, []string{"--group", "--limit", "--socket"}, []string{"--all"}},
	{[]string{"cachecast", "watch", "--fr"}, []string{"--from"}, []string{"--json"}},
	{[]string{"cachecast", "completion", ""}, []string{"bash", "zsh", "fish"}, nil},
	{[]string{"cachecast", "help", "group", ""}, []string{"reset"}, nil},
}

// TestBashCompletion runs the script in bash as Tab would.
func TestBashCompletion(t *testing.T) {
	script := writeScript(t, "bash")
	for _, tt := range completions {
		var words []string
		for _, w := range tt.line {
			words = append(words, "'"+w+"'")
		}
		prog := `source "$1"; COMP_WORDS=(` + strings.Join(words, " ") + `); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _cachecast; printf '%s\n' "${COMPREPLY[@]}"`
		out, err := exec.CommandContext(context.Background(), "bash", "-c", prog, "bash", script).CombinedOutput()
		checkOffered(t, "bash", tt.line, string(out), err, tt.want, tt.not)
	}
}

// TestFishCompletion asks fish what it would offer; zsh's script is
// checked for syntax and loading.
func TestFishCompletion(t *testing.T) {
	fish := testkit.NeedTool(t, "fish", "fish")
	script := writeScript(t, "fish")
	for _, tt := range completions {
		line := strings.Join(tt.line, " ")
		out, err := exec.Command(fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, line).CombinedOutput()
		checkOffered(t, "fish", tt.line, string(out), err, tt.want, tt.not)
	}
	zsh := testkit.NeedTool(t, "zsh", "zsh")
	out, err := exec.Command(zsh, "-f", "-c", `autoload -U compinit && compinit -u -D && source $1 && whence -w _cachecast`, "zsh", writeScript(t, "zsh")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "_cachecast: function") {
		t.Errorf("zsh could not load the script: %v\n%s", err, out)
	}
}

func checkOffered(t *testing.T, shell string, line []string, out string, err error, want, not []string) {
	t.Helper()
	if err != nil {
		t.Errorf("%s %q: %v\n%s", shell, line, err, out)
		return
	}
	var offered []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		w, _, _ := strings.Cut(l, "\t") // fish: word<TAB>description
		offered = append(offered, w)
	}
	for _, w := range want {
		if !slices.Contains(offered, w) {
			t.Errorf("%s %q offers %q, lacks %s", shell, line, offered, w)
		}
	}
	for _, w := range not {
		if slices.Contains(offered, w) {
			t.Errorf("%s %q offers %s", shell, line, w)
		}
	}
}
