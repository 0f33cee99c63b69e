package manpage

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/internal/testkit"
)

func TestEscape(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"plain words", "plain words"},
		{"--data-dir", `\-\-data\-dir`},
		{`a\b`, `a\eb`},
		{".starts with a dot", `\&.starts with a dot`},
		{"'quote", `\&'quote`},
	} {
		if got := Escape(tt.in); got != tt.want {
			t.Errorf("Escape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPage(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("data-dir", "./data", "the `directory` of the store")
	fs.BoolP("verbose", "v", false, "say more")
	fs.StringSlice("join", nil, "seeds")
	fs.Int("hidden-one", 1, "not shown")
	if err := fs.MarkHidden("hidden-one"); err != nil {
		t.Fatal(err)
	}
	p := New("tool", "8", "does things", "v1.2.3", "System Administration")
	p.Section("Synopsis")
	p.Literal("tool [flags]\n.odd line")
	p.Section("Description")
	p.Para("First paragraph.\n\n.Second, starting with a dot.")
	p.Section("Options")
	p.Flags(fs)
	p.Item("SIGHUP", "reloads")
	src := p.String()
	for _, want := range []string{
		`.TH TOOL 8 "" "cachecast v1.2.3" "System Administration"`,
		"tool \\- does things\n",
		".SH \"SYNOPSIS\"\n",
		"\\&.odd line\n",
		"\\&.Second, starting with a dot.\n",
		"\\fB\\-\\-data\\-dir\\fR \\fIdirectory\\fR\nthe directory of the store (default: \"./data\")\n",
		"\\fB\\-v\\fR, \\fB\\-\\-verbose\\fR\nsay more\n",
		"\\fB\\-\\-join\\fR \\fIstrings\\fR\nseeds\n",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("page lacks %q:\n%s", want, src)
		}
	}
	if strings.Contains(src, "hidden") {
		t.Errorf("page shows a hidden flag:\n%s", src)
	}
	testkit.LintMan(t, src)
}
