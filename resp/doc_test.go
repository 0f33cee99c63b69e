package resp

import (
	"go/parser"
	"go/token"
	"regexp"
	"strings"
	"testing"
)

// TestDocNamesEveryCommand checks that the package doc, the reference of
// the Redis front door, names every command of the table, so that a
// command added without its documentation fails here.
func TestDocNamesEveryCommand(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	words := map[string]bool{}
	for _, w := range regexp.MustCompile(`[A-Z][A-Z.]+`).FindAllString(f.Doc.Text(), -1) {
		words[strings.TrimRight(w, ".")] = true
	}
	for _, name := range CommandNames() {
		if upper := strings.ToUpper(name); !words[upper] {
			t.Errorf("the package doc does not name %s", upper)
		}
	}
}
