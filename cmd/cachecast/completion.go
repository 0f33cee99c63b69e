package main

import (
	"context"
	"slices"
	"strings"
	"text/template"

	"github.com/spf13/pflag"
)

// completionCmd prints a shell's completion script made from the table
// of commands and their flag sets, so that a new command or flag
// completes without an edit here. Its setup is set in init: the script
// reads commands, which lists completionCmd.
var completionCmd = &command{
	name:    "completion",
	args:    "bash|zsh|fish",
	summary: "print the shell completion script for bash, zsh or fish",
	help: `Load it in the running shell:

  source <(cachecast completion bash)      # bash
  source <(cachecast completion zsh)       # zsh
  cachecast completion fish | source       # fish

The Debian package installs all three where the shells look for them.`,
	choices: []string{"bash", "zsh", "fish"},
	minArgs: 1, maxArgs: 1,
}

func init() {
	completionCmd.setup = func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		return func(ctx context.Context, e *env, args []string) error {
			tmpl, ok := completionScripts[args[0]]
			if !ok {
				return usagef("no completion for the shell %q (bash, zsh or fish)", args[0])
			}
			return tmpl.Execute(e.stdout, completionData(e))
		}
	}
}

// compCommand is what a completion script knows of one command.
type compCommand struct {
	Name, First, Second, Summary string
	Choices                      []string
	Flags                        []compFlag
}

// compFlag is one flag of a command.
type compFlag struct {
	Name, Short, Usage string
	TakesValue         bool
}

// compData is what every script is made from.
type compData struct {
	Global   []compFlag
	Commands []compCommand
	Firsts   []string // the first words of the commands, "help" included
}

func completionData(e *env) compData {
	top := pflag.NewFlagSet("cachecast", pflag.ContinueOnError)
	(&globals{}).register(top, e)
	d := compData{Global: compFlags(top), Firsts: []string{"help"}}
	for _, c := range commands {
		first, second, _ := strings.Cut(c.name, " ")
		d.Commands = append(d.Commands, compCommand{
			Name: c.name, First: first, Second: second, Summary: c.summary,
			Choices: c.choices, Flags: compFlags(commandFlags(c, e)),
		})
		if !slices.Contains(d.Firsts, first) {
			d.Firsts = append(d.Firsts, first)
		}
	}
	return d
}

// compFlags lists the flags of fs that are not hidden, --help included.
func compFlags(fs *pflag.FlagSet) []compFlag {
	var out []compFlag
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			_, usage := pflag.UnquoteUsage(f)
			out = append(out, compFlag{f.Name, f.Shorthand, usage, f.Value.Type() != "bool"})
		}
	})
	return append(out, compFlag{Name: "help", Short: "h", Usage: "show the help"})
}

// commandFlags is the flag set cmd parses: the flags every command takes
// and its own.
func commandFlags(cmd *command, e *env) *pflag.FlagSet {
	fs := newFlagSet(cmd)
	var g globals
	g.register(fs, e)
	cmd.setup(fs, &g)
	return fs
}

var completionFuncs = template.FuncMap{
	"join": strings.Join,
	// flagWords is the flags as typed: --name and -s.
	"flagWords": func(fs []compFlag) string {
		var w []string
		for _, f := range fs {
			w = append(w, "--"+f.Name)
			if f.Short != "" {
				w = append(w, "-"+f.Short)
			}
		}
		return strings.Join(w, " ")
	},
	// valued is the flags of fs that take a value, as typed.
	"valued": func(fs []compFlag) string {
		var w []string
		for _, f := range fs {
			if f.TakesValue {
				w = append(w, "--"+f.Name)
				if f.Short != "" {
					w = append(w, "-"+f.Short)
				}
			}
		}
		return strings.Join(w, " ")
	},
	// sq quotes s for a shell's single quotes.
	"sq": func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" },
	// zdesc is "word:description" for zsh's _describe, colons escaped.
	"zdesc": func(word, desc string) string {
		return "'" + strings.ReplaceAll(strings.ReplaceAll(word, ":", `\:`)+":"+desc, "'", `'\''`) + "'"
	},
}

// completionScripts are the scripts by shell.
var completionScripts = map[string]*template.Template{
	"bash": template.Must(template.New("bash").Funcs(completionFuncs).Parse(bashCompletion)),
	"zsh":  template.Must(template.New("zsh").Funcs(completionFuncs).Parse(zshCompletion)),
	"fish": template.Must(template.New("fish").Funcs(completionFuncs).Parse(fishCompletion)),
}
