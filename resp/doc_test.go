package resp

import (
	"regexp"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestDocNamesEveryCommand checks that the package doc, the reference of
// the Redis front door, names every command of the table, so that a
// command added without its documentation fails here.
func TestDocNamesEveryCommand(t *testing.T) {
	words := map[string]bool{}
	for _, w := range regexp.MustCompile(`[A-Z][A-Z.]+`).FindAllString(testkit.PackageDoc(t, "doc.go"), -1) {
		words[strings.TrimRight(w, ".")] = true
	}
	for _, name := range CommandNames() {
		if upper := strings.ToUpper(name); !words[upper] {
			t.Errorf("the package doc does not name %s", upper)
		}
	}
}
