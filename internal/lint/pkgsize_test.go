package lint

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// maxPackageLines is the most lines of non-test Go a package may have
// without saying, in its package doc, why it is larger: past it, a
// package usually holds several concerns that would read better as
// packages of their own.
const maxPackageLines = 2500

// sizeDrift is how far the size a package doc states ("about 3,400
// lines") may be from the package's real size, as a fraction of it.
const sizeDrift = 0.10

// sizeClaim finds the size a package doc states.
var sizeClaim = regexp.MustCompile(`(?i)\babout ([0-9][0-9,]*) lines`)

// inFlux are packages whose stated size may be missing or stale while a
// change under way rewrites them, with the reason; the entry goes with
// that change.
var inFlux = map[string]string{}

// goPackage is what TestPackageSize needs of one directory's package.
type goPackage struct {
	lines int    // lines of its non-test Go files
	doc   string // its package doc
}

// TestPackageSize fails for a package of the module over maxPackageLines
// whose package doc does not state its size with the reason it is that
// large (a doc that says "about N lines"), and for a package doc whose
// stated size is more than sizeDrift off the real one.
func TestPackageSize(t *testing.T) {
	root := moduleRoot(t)
	pkgs := readPackages(t, root)
	if len(pkgs) < 20 {
		t.Fatalf("read only %d packages under %s: not the module's root?", len(pkgs), root)
	}
	for dir, p := range pkgs {
		if why := sizeStated(dir, p); why != "" {
			if flux, ok := inFlux[dir]; ok {
				t.Logf("%s, left as it is: %s", why, flux)
				continue
			}
			t.Error(why)
		}
	}
}

// sizeStated says what is wrong with the size package dir states, or ""
// when nothing is.
func sizeStated(dir string, p *goPackage) string {
	m := sizeClaim.FindStringSubmatch(p.doc)
	if m == nil {
		if p.lines > maxPackageLines {
			return fmt.Sprintf("%s: %d lines of non-test code, more than %d, and its package doc does not say why (\"# Why it is this large\", about N lines)", dir, p.lines, maxPackageLines)
		}
		return ""
	}
	said, err := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
	if off := float64(said-p.lines) / float64(p.lines); err != nil || off > sizeDrift || off < -sizeDrift {
		return fmt.Sprintf("%s: its package doc says %q; it has %d lines of non-test code", dir, m[0], p.lines)
	}
	return ""
}

// readPackages reads every directory of non-test Go files under root:
// its lines and its package doc, by the directory's path from root.
func readPackages(t *testing.T, root string) map[string]*goPackage {
	t.Helper()
	fset := token.NewFileSet()
	pkgs := map[string]*goPackage{}
	err := walkSources(root, func(path string) error {
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		p := pkgs[dir]
		if p == nil {
			p = &goPackage{}
			pkgs[dir] = p
		}
		p.lines += strings.Count(string(src), "\n")
		if f.Doc != nil {
			p.doc += f.Doc.Text()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}
