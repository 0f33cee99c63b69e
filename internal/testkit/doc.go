package testkit

import (
	"go/parser"
	"go/token"
	"testing"
)

// PackageDoc is the text of the package doc comment in the file path (a
// package's doc.go), as go doc shows it: the tests that hold a reference
// to the code read it with this.
func PackageDoc(t testing.TB, path string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatalf("%s has no package doc", path)
	}
	return f.Doc.Text()
}
