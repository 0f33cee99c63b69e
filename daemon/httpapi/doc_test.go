package httpapi

import (
	"regexp"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/daemon/internal/access"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
)

// TestDocIsTheRouteTable checks the package doc, the API's reference,
// against the code: it lists every route (method and path, the wildcards'
// names aside) with the route's role in brackets, and no route the server
// does not have; and it names every error code of the wire format.
func TestDocIsTheRouteTable(t *testing.T) {
	doc := testkit.PackageDoc(t, "doc.go")
	wildcard := regexp.MustCompile(`\{[^}]*\}`)
	// A route's line of the doc: the method, the path (a query after it
	// is dropped), anything, and the role in brackets.
	line := regexp.MustCompile(`(?m)^\t(GET|PUT|POST|DELETE|HEAD) (/[^ ?\t]*)\S*(.*)$`)
	// "GET /v1/topics/{}" -> the brackets of its lines (subscribe has two:
	// a stream, [read; ...], and a group member, [consume]).
	roles := map[string][]string{}
	for _, m := range line.FindAllStringSubmatch(doc, -1) {
		key := m[1] + " " + wildcard.ReplaceAllString(m[2], "{}")
		bracket := ""
		if i := strings.LastIndex(m[3], "["); i >= 0 {
			bracket = m[3][i:]
		}
		roles[key] = append(roles[key], bracket)
	}
	roleWord := map[access.Role]string{
		access.RoleNone: "none", access.RoleRead: "read", access.RoleConsume: "consume",
		access.RolePublish: "publish", access.RoleAdmin: "admin",
	}
	inCode := map[string]bool{}
	for _, rt := range (&Server{}).routes() {
		key := wildcard.ReplaceAllString(rt.pattern, "{}")
		inCode[key] = true
		brackets, ok := roles[key]
		switch {
		case !ok:
			t.Errorf("the package doc does not list %s", rt.pattern)
		case !strings.HasPrefix(brackets[0], "["+roleWord[rt.role]):
			t.Errorf("the package doc gives %s the role %q; the route needs %s", rt.pattern, brackets[0], roleWord[rt.role])
		}
	}
	for key := range roles {
		if !inCode[key] {
			t.Errorf("the package doc lists %s, which no route serves", key)
		}
	}
	for _, code := range wire.Codes {
		if !regexp.MustCompile(`\b` + code + `\b`).MatchString(doc) {
			t.Errorf("the package doc does not name the error code %s", code)
		}
	}
}
