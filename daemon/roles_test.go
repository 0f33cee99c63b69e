package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/daemon/internal/access"
	"github.com/cachecast/cachecast/group"
	"github.com/cachecast/cachecast/internal/testkit"
)

// needRoot fails a test that runs clients as other users when it is not
// root: setpriv may change the user only for root (CI runs the tests as
// root, as the full-disk tests need too).
func needRoot(t *testing.T) {
	t.Helper()
	testkit.NeedRoot(t, "running clients as other uids with setpriv")
	testkit.NeedTool(t, "setpriv", "util-linux")
	testkit.NeedTool(t, "curl", "curl")
}

// roleConfig is testConfig with a socket any user may open.
func roleConfig(t *testing.T) Config {
	t.Helper()
	cfg := testConfig(t)
	cfg.SocketMode = 0o666
	if err := os.Chmod(filepath.Dir(cfg.Socket), 0o755); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// uidClient runs curl as another user (setpriv --reuid, --regid, and
// --clear-groups or the given groups) against the socket: the daemon sees
// that user's real credentials.
type uidClient struct {
	t      *testing.T
	sock   string
	uid    int
	groups []int
}

// do sends one request. A subscription's headers come at once; the
// stream is cut after a second (curl's --max-time), its status kept.
func (u uidClient) do(method, path, body string) resp {
	u.t.Helper()
	args := []string{"--reuid=" + strconv.Itoa(u.uid), "--regid=" + strconv.Itoa(u.uid)}
	if len(u.groups) == 0 {
		args = append(args, "--clear-groups")
	} else {
		gs := make([]string, len(u.groups))
		for i, g := range u.groups {
			gs[i] = strconv.Itoa(g)
		}
		args = append(args, "--groups="+strings.Join(gs, ","))
	}
	args = append(args, "curl", "-sS", "--unix-socket", u.sock, "-o", "-", "-w", "\n%{http_code}")
	if method == "HEAD" {
		args = append(args, "--head") // -X HEAD would wait for a body
	} else {
		args = append(args, "-X", method)
	}
	if strings.Contains(path, "/subscribe") {
		args = append(args, "-N", "--max-time", "1")
	}
	if body != "" {
		args = append(args, "--data-binary", body)
	}
	args = append(args, "http://cachecast"+path)
	cmd := exec.Command("setpriv", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := stdout.Bytes()
	i := bytes.LastIndexByte(out, '\n')
	status, perr := strconv.Atoi(string(out[i+1:]))
	if i < 0 || perr != nil || status == 0 {
		u.t.Fatalf("%s %s as uid %d: no status (%v): %s %s", method, path, u.uid, err, out, stderr.Bytes())
	}
	return resp{status: status, body: out[:i]}
}

// TestRoles runs every route as each role, with real uids: a user with
// no role, a reader, a consumer (by uid, and by a supplementary group),
// a publisher, an admin by --admin-uids, and root (always admin). A
// refused request is 403 forbidden naming the role and the uid, and
// changes nothing.
func TestRoles(t *testing.T) {
	t.Parallel()
	needRoot(t)
	const (
		none = 61000 + iota
		reader
		consumer
		consumerByGID
		publisher
		admin
		consumeGID = 61100
	)
	cfg := roleConfig(t)
	cfg.ReadUIDs = []uint32{reader}
	cfg.ConsumeUIDs = []uint32{consumer}
	cfg.ConsumeGIDs = []uint32{consumeGID}
	cfg.AllowUIDs = []uint32{publisher}
	cfg.AdminUIDs = []uint32{admin}
	td := startDaemon(t, cfg)
	td.put("t", "k", "v")

	type who struct {
		name   string
		uid    int
		groups []int
		role   access.Role
	}
	callers := []who{
		{"none", none, nil, access.RoleNone},
		{"reader", reader, nil, access.RoleRead},
		{"consumer", consumer, nil, access.RoleConsume},
		{"consumer-by-gid", consumerByGID, []int{consumeGID}, access.RoleConsume},
		{"publisher", publisher, nil, access.RolePublish},
		{"admin", admin, nil, access.RoleAdmin},
		{"root", 0, nil, access.RoleAdmin},
	}
	// holds reports whether a caller of role r is served a route that
	// needs need: admin holds every role, the others read and their own.
	holds := func(r, need access.Role) bool {
		return r == access.RoleAdmin || need == access.RoleNone || need == access.RoleRead && r != access.RoleNone || r == need
	}

	// written counts the node's records but its group-host entries, which
	// a member that left in an earlier row writes a second later.
	written := func() uint64 {
		st := td.d.Store()
		return st.Stats().Records - st.TopicEnd(group.HostsTopic)
	}
	for _, c := range callers {
		t.Run(c.name, func(t *testing.T) {
			as := uidClient{t: t, sock: cfg.Socket, uid: c.uid, groups: c.groups}
			// A cursor of root's per caller, so that moving and deleting
			// another user's cursor is tried on one that exists.
			theirs := "root-" + c.name
			if r := td.do("POST", "/v1/cursors/"+theirs, strings.NewReader(`{"topic":"t","offset":0}`)); r.status != 200 {
				t.Fatalf("root's cursor: %d %s", r.status, r.body)
			}
			mine := "mine-" + c.name
			// A group per caller: a group is its creator's (issue 31).
			grp := "g-" + c.name
			for _, rt := range []struct {
				method, path, body string
				need               access.Role
				status             int         // when served
				route              access.Role // the route's role, when need is checked after it
			}{
				{"GET", "/healthz", "", access.RoleNone, 200, access.RoleNone},
				{"GET", "/readyz", "", access.RoleNone, 200, access.RoleNone},
				{"GET", "/v1/status", "", access.RoleRead, 200, access.RoleNone},
				{"GET", "/v1/cluster", "", access.RoleRead, 200, access.RoleNone},
				{"GET", "/v1/topics", "", access.RoleRead, 200, access.RoleNone},
				{"GET", "/v1/topics/t/keys", "", access.RoleRead, 200, access.RoleNone},
				{"GET", "/v1/topics/t/keys/k", "", access.RoleRead, 200, access.RoleNone},
				{"HEAD", "/v1/topics/t/keys/k", "", access.RoleRead, 200, access.RoleNone},
				{"GET", "/v1/topics/t/subscribe?from=earliest", "", access.RoleRead, 200, access.RoleNone},
				{"GET", "/v1/topics/t/subscribe?name=" + theirs, "", access.RoleRead, 200, access.RoleNone}, // resumes, moves nothing
				{"GET", "/v1/groups", "", access.RoleRead, 200, access.RoleNone},
				{"GET", "/v1/cursors", "", access.RoleRead, 200, access.RoleNone},
				{"GET", "/v1/cursors/" + theirs, "", access.RoleRead, 200, access.RoleNone},
				{"POST", "/v1/cursors/" + mine, `{"topic":"t","offset":1}`, access.RoleConsume, 200, access.RoleNone},
				{"GET", "/v1/topics/t/subscribe?name=" + mine + "&ack=auto", "", access.RoleConsume, 200, access.RoleRead},
				{"DELETE", "/v1/cursors/" + mine, "", access.RoleConsume, 200, access.RoleNone},
				{"GET", "/v1/topics/t/subscribe?mode=clustering&group=" + grp, "", access.RoleConsume, 200, access.RoleRead},
				{"POST", "/v1/topics/t/groups/" + grp + "/ack", `{"ack":["0000000000000001-1"]}`, access.RoleConsume, 404, access.RoleNone}, // no member left
				{"GET", "/v1/topics/t/groups/" + grp + "/dlq", "", access.RoleConsume, 200, access.RoleNone},
				{"GET", "/v1/topics/t/groups/" + grp + "/dlq/0000000000000001-1", "", access.RoleConsume, 404, access.RoleNone},
				{"PUT", "/v1/topics/t/keys/k", "v", access.RolePublish, 200, access.RoleNone},
				{"POST", "/v1/topics/t/messages", `{"key":"k2","value":"v"}`, access.RolePublish, 200, access.RoleNone},
				{"DELETE", "/v1/topics/t/keys/k2", "", access.RolePublish, 200, access.RoleNone},
				{"POST", "/v1/topics/t/groups/" + grp + "/reset", `{"to":"latest"}`, access.RoleAdmin, 200, access.RoleNone},
				{"POST", "/v1/topics/t/groups/" + grp + "/dlq/replay", `{"all":true}`, access.RoleAdmin, 200, access.RoleNone},
				{"POST", "/v1/repair/accept", "", access.RoleAdmin, 200, access.RoleNone},
				{"GET", "/v1/backup", "", access.RoleAdmin, 200, access.RoleNone},
				// Another user's cursor: its owner (root) or an admin.
				{"POST", "/v1/cursors/" + theirs, `{"topic":"t","offset":1}`, access.RoleAdmin, 200, access.RoleConsume},
				{"GET", "/v1/topics/t/subscribe?name=" + theirs + "&ack=auto", "", access.RoleAdmin, 200, access.RoleRead},
				{"DELETE", "/v1/cursors/" + theirs, "", access.RoleAdmin, 200, access.RoleConsume},
			} {
				served := holds(c.role, rt.need)
				want := rt.status
				if !served {
					want = 403
				}
				records := written()
				r := as.do(rt.method, rt.path, rt.body)
				if strings.Contains(rt.path, "/subscribe") {
					// curl has cut the stream; its handler's end (a group
					// member leaving, an auto-acked cursor moving) is the
					// daemon's to see, after curl is gone: wait for it, so
					// that the next row does not meet the member still there
					// or see its last writes.
					testkit.Eventually(t, 10*time.Second, "the subscription's handler to end", func() bool {
						open, waiting, streams := td.d.limits.Counts()
						return streams == 0 && open == waiting
					})
				}
				if r.status != want {
					t.Errorf("%s %s (needs %s): %d %s; want %d", rt.method, rt.path, rt.need, r.status, r.body, want)
					continue
				}
				if served || rt.method == "HEAD" { // HEAD: no body to read
					continue
				}
				if n := written(); n != records {
					t.Errorf("%s %s: refused, yet %d records were written", rt.method, rt.path, n-records)
				}
				var e struct {
					Error struct{ Code, Message string }
				}
				_ = json.Unmarshal(r.body, &e)
				// The refusal names the first role the caller lacks.
				need := rt.need
				if rt.route != access.RoleNone && !holds(c.role, rt.route) {
					need = rt.route
				} else if rt.route != access.RoleNone && need == access.RoleAdmin && rt.route == access.RoleRead && !holds(c.role, access.RoleConsume) {
					need = access.RoleConsume // ack=auto
				}
				if need == access.RoleAdmin && c.role == access.RoleConsume && strings.Contains(rt.path, theirs) {
					// A consumer is refused by the cursor's owner, not by a role.
					if e.Error.Code != "forbidden" || !strings.Contains(e.Error.Message, "belongs to uid 0") {
						t.Errorf("%s %s: %s; want forbidden naming the owner", rt.method, rt.path, r.body)
					}
					continue
				}
				if e.Error.Code != "forbidden" || !strings.Contains(e.Error.Message, fmt.Sprintf("uid %d ", c.uid)) ||
					!strings.Contains(e.Error.Message, "the "+need.String()+" role") {
					t.Errorf("%s %s: %s; want forbidden naming uid %d and the %s role", rt.method, rt.path, r.body, c.uid, need)
				}
			}
			if c.role < access.RoleConsume || c.role == access.RolePublish {
				if _, _, ok := td.d.Store().Cursor(mine); ok {
					t.Errorf("uid %d made a cursor without the consume role", c.uid)
				}
			}
		})
	}
}

// TestRolesHas is the role logic as a table: the fallbacks of empty
// lists, groups, root and the daemon's own user.
func TestRolesHas(t *testing.T) {
	const self = 999
	me := access.Caller{Known: true, UID: 1000, GID: 1000, Groups: []uint32{1000, 27, 44}}
	for _, tc := range []struct {
		name string
		cfg  Config
		c    access.Caller
		want []access.Role // the roles held, of read, consume, publish, admin
	}{
		{"no lists: every role but admin", Config{}, me, []access.Role{access.RoleRead, access.RoleConsume, access.RolePublish}},
		{"no lists, credentials unknown", Config{}, access.Caller{}, []access.Role{access.RoleRead, access.RoleConsume, access.RolePublish}},
		{"root", Config{AllowUIDs: []uint32{5}}, access.Caller{Known: true}, []access.Role{access.RoleRead, access.RoleConsume, access.RolePublish, access.RoleAdmin}},
		{"the daemon's own user", Config{AllowUIDs: []uint32{5}}, access.Caller{Known: true, UID: self}, []access.Role{access.RoleRead, access.RoleConsume, access.RolePublish, access.RoleAdmin}},
		{"publishers named: consume follows", Config{AllowUIDs: []uint32{5}}, me, []access.Role{access.RoleRead}},
		{"a publisher consumes by default", Config{AllowUIDs: []uint32{1000}}, me, []access.Role{access.RoleRead, access.RoleConsume, access.RolePublish}},
		{"consumers named apart", Config{AllowUIDs: []uint32{1000}, ConsumeUIDs: []uint32{5}}, me, []access.Role{access.RoleRead, access.RolePublish}},
		{"a consumer by a supplementary group", Config{AllowUIDs: []uint32{5}, ConsumeGIDs: []uint32{44}}, me, []access.Role{access.RoleRead, access.RoleConsume}},
		{"readers named: writers follow", Config{ReadUIDs: []uint32{5}}, me, nil},
		{"a reader may write when no writer is named", Config{ReadGIDs: []uint32{27}}, me, []access.Role{access.RoleRead, access.RoleConsume, access.RolePublish}},
		{"readers named, publishers open to the reader list only", Config{ReadUIDs: []uint32{5}, AllowUIDs: []uint32{1000}}, me, []access.Role{access.RoleRead, access.RoleConsume, access.RolePublish}},
		{"admin by gid", Config{AllowUIDs: []uint32{5}, AdminGIDs: []uint32{1000}}, me, []access.Role{access.RoleRead, access.RoleConsume, access.RolePublish, access.RoleAdmin}},
		{"credentials unknown: refused where a list is named", Config{AllowUIDs: []uint32{1000}}, access.Caller{UID: 1000}, []access.Role{access.RoleRead}},
	} {
		r := tc.cfg.Roles(self)
		var got []access.Role
		for _, role := range []access.Role{access.RoleRead, access.RoleConsume, access.RolePublish, access.RoleAdmin} {
			if r.Has(tc.c, role) {
				got = append(got, role)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
		if !r.Has(tc.c, access.RoleNone) {
			t.Errorf("%s: health refused", tc.name)
		}
	}
}

// TestMemberBound checks --max-members-per-uid with a real uid: while the
// user holds its one member, a second is 429 too_many; once the first
// leaves, it may join again. Root, an admin, is not counted.
func TestMemberBound(t *testing.T) {
	t.Parallel()
	needRoot(t)
	const user = 61050
	cfg := roleConfig(t)
	cfg.MaxMembersPerUID = 1
	td := startDaemon(t, cfg)
	held := func() int {
		return td.d.api.Members(user)
	}
	path := "/v1/topics/t/subscribe?mode=clustering&group=g"
	first := exec.Command("setpriv", "--reuid="+strconv.Itoa(user), "--regid="+strconv.Itoa(user), "--clear-groups",
		"curl", "-sSN", "--unix-socket", cfg.Socket, "http://cachecast"+path)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Process.Kill(); _ = first.Wait() })
	testkit.Eventually(t, 5*time.Second, "the first member", func() bool { return held() == 1 })

	as := uidClient{t: t, sock: cfg.Socket, uid: user}
	r := as.do("GET", path, "")
	if r.status != 429 || !strings.Contains(string(r.body), `"too_many"`) || !strings.Contains(string(r.body), "--max-members-per-uid") {
		t.Fatalf("a second member: %d %s", r.status, r.body)
	}
	for range 3 { // root is an admin: not bound
		sub := td.subscribe("t/subscribe?mode=clustering&group=g")
		defer sub.close()
	}
	_ = first.Process.Kill()
	_ = first.Wait()
	testkit.Eventually(t, 5*time.Second, "the first member to leave", func() bool { return held() == 0 })
	if r := as.do("GET", path, ""); r.status != 200 {
		t.Fatalf("a member after the first left: %d %s", r.status, r.body)
	}
}
