// Package manpage writes manual pages in roff (man(7) macros) from the
// definitions the binaries run with: pflag flag sets and lists of
// commands, so that cachecastd(8) and cachecast(1) cannot drift from the
// code. The binaries print their pages (cachecastd --man, cachecast
// --man); make deb packs them.
package manpage

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// Page is a manual page being written.
type Page struct {
	b strings.Builder
}

// New starts the page name(section): title is what NAME says after the
// dash, version goes in the footer, manual is the header's centre
// ("System Administration", "User Commands"). The date is left out so
// that a build is reproducible.
func New(name, section, title, version, manual string) *Page {
	p := &Page{}
	fmt.Fprintf(&p.b, ".TH %s %s \"\" %s %s\n", strings.ToUpper(name), section,
		quote("cachecast "+version), quote(manual))
	p.Section("NAME")
	fmt.Fprintf(&p.b, "%s \\- %s\n", Escape(name), Escape(title))
	return p
}

// Section starts a section (.SH).
func (p *Page) Section(heading string) {
	fmt.Fprintf(&p.b, ".SH %s\n", quote(strings.ToUpper(heading)))
}

// Para writes a paragraph of plain text; blank lines in text split it.
func (p *Page) Para(text string) {
	for _, para := range strings.Split(strings.TrimSpace(text), "\n\n") {
		p.b.WriteString(".PP\n")
		p.text(para)
	}
}

// Literal writes text as is, line by line, in a no-fill block (examples,
// synopses).
func (p *Page) Literal(text string) {
	p.b.WriteString(".PP\n.nf\n.RS 4\n")
	p.text(strings.TrimRight(text, "\n"))
	p.b.WriteString(".RE\n.fi\n")
}

// Item writes a tagged paragraph (.TP): tag in bold, then text.
func (p *Page) Item(tag, text string) {
	fmt.Fprintf(&p.b, ".TP\n\\fB%s\\fR\n", Escape(tag))
	p.text(text)
}

// In indents what follows (.RS) under the last item's text, until Out.
func (p *Page) In() { p.b.WriteString(".RS\n") }

// Out ends the indent of In (.RE).
func (p *Page) Out() { p.b.WriteString(".RE\n") }

// Flags writes one tagged paragraph per flag of fs that is not hidden,
// in fs's order: the flag with its value's type, its usage, its default.
func (p *Page) Flags(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		p.b.WriteString(".TP\n")
		if f.Shorthand != "" {
			fmt.Fprintf(&p.b, "\\fB\\-%s\\fR, ", Escape(f.Shorthand))
		}
		fmt.Fprintf(&p.b, "\\fB\\-\\-%s\\fR", Escape(f.Name))
		if name, _ := pflag.UnquoteUsage(f); name != "" {
			fmt.Fprintf(&p.b, " \\fI%s\\fR", Escape(name))
		}
		p.b.WriteString("\n")
		_, usage := pflag.UnquoteUsage(f)
		if def := Default(f); def != "" {
			usage += " (default: " + def + ")"
		}
		p.text(usage)
	})
}

// Default is the default a page shows for f: empty when there is nothing
// to show (an empty string or list, false).
func Default(f *pflag.Flag) string {
	switch d := f.DefValue; {
	case d == "", d == "[]", f.Value.Type() == "bool" && d == "false":
		return ""
	case f.Value.Type() == "string":
		return `"` + d + `"`
	default:
		return strings.Trim(d, "[]")
	}
}

// String is the page's roff source.
func (p *Page) String() string { return p.b.String() }

// text writes lines of text, escaped, none starting with a control
// character.
func (p *Page) text(s string) {
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimRight(line, " ")
		if line == "" {
			p.b.WriteString(".sp\n")
			continue
		}
		p.b.WriteString(Escape(line))
		p.b.WriteString("\n")
	}
}

// Escape makes s safe as roff text: backslashes doubled as \e, dashes as
// \- (so that flags copy and paste as typed), and a line that would start
// with a control character ('.' or ') guarded by \&.
func Escape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

func quote(s string) string {
	return `"` + strings.ReplaceAll(Escape(s), `"`, `\(dq`) + `"`
}
