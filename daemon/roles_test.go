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

	"github.com/cachecast/cachecast/group"
	"github.com/cachecast/cachecast/internal/testkit"
)

// needRoot fails a test that runs clients as other users when it is not
// root: setpriv may change the user only for root (CI runs the tests as
// root, as the full-disk tests need too).
func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("runs clients as other uids with setpriv, which needs root")
	}
	for _, tool := range []string{"setpriv", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run clients as other uids: %v", tool, err)
		}
	}
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
		role   Role
	}
	callers := []who{
		{"none", none, nil, RoleNone},
		{"reader", reader, nil, RoleRead},
		{"consumer", consumer, nil, RoleConsume},
		{"consumer-by-gid", consumerByGID, []int{consumeGID}, RoleConsume},
		{"publisher", publisher, nil, RolePublish},
		{"admin", admin, nil, RoleAdmin},
		{"root", 0, nil, RoleAdmin},
	}
	// holds reports whether a caller of role r is served a route that
	// needs need: admin holds every role, the others read and their own.
	holds := func(r, need Role) bool {
		return r == RoleAdmin || need == RoleNone || need == RoleRead && r != RoleNone || r == need
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
			for _, rt := range []struct {
				method, path, body string
				need               Role
				status             int  // when served
				route              Role // the route's role, when need is checked after it
			}{
				{"GET", "/healthz", "", RoleNone, 200, RoleNone},
				{"GET", "/readyz", "", RoleNone, 200, RoleNone},
				{"GET", "/v1/status", "", RoleRead, 200, RoleNone},
				{"GET", "/v1/cluster", "", RoleRead, 200, RoleNone},
				{"GET", "/v1/topics", "", RoleRead, 200, RoleNone},
				{"GET", "/v1/topics/t/keys", "", RoleRead, 200, RoleNone},
				{"GET", "/v1/topics/t/keys/k", "", RoleRead, 200, RoleNone},
				{"HEAD", "/v1/topics/t/keys/k", "", RoleRead, 200, RoleNone},
				{"GET", "/v1/topics/t/subscribe?from=earliest", "", RoleRead, 200, RoleNone},
				{"GET", "/v1/topics/t/subscribe?name=" + theirs, "", RoleRead, 200, RoleNone}, // resumes, moves nothing
				{"GET", "/v1/groups", "", RoleRead, 200, RoleNone},
				{"GET", "/v1/cursors", "", RoleRead, 200, RoleNone},
				{"GET", "/v1/cursors/" + theirs, "", RoleRead, 200, RoleNone},
				{"POST", "/v1/cursors/" + mine, `{"topic":"t","offset":1}`, RoleConsume, 200, RoleNone},
				{"GET", "/v1/topics/t/subscribe?name=" + mine + "&ack=auto", "", RoleConsume, 200, RoleRead},
				{"DELETE", "/v1/cursors/" + mine, "", RoleConsume, 200, RoleNone},
				{"GET", "/v1/topics/t/subscribe?mode=clustering&group=g", "", RoleConsume, 200, RoleRead},
				{"POST", "/v1/topics/t/groups/g/ack", `{"ack":["0000000000000001-1"]}`, RoleConsume, 404, RoleNone}, // no member left
				{"GET", "/v1/topics/t/groups/g/dlq", "", RoleConsume, 200, RoleNone},
				{"GET", "/v1/topics/t/groups/g/dlq/0000000000000001-1", "", RoleConsume, 404, RoleNone},
				{"PUT", "/v1/topics/t/keys/k", "v", RolePublish, 200, RoleNone},
				{"POST", "/v1/topics/t/messages", `{"key":"k2","value":"v"}`, RolePublish, 200, RoleNone},
				{"DELETE", "/v1/topics/t/keys/k2", "", RolePublish, 200, RoleNone},
				{"POST", "/v1/topics/t/groups/g/reset", `{"to":"latest"}`, RoleAdmin, 200, RoleNone},
				{"POST", "/v1/topics/t/groups/g/dlq/replay", `{"all":true}`, RoleAdmin, 200, RoleNone},
				// Another user's cursor: its owner (root) or an admin.
				{"POST", "/v1/cursors/" + theirs, `{"topic":"t","offset":1}`, RoleAdmin, 200, RoleConsume},
				{"GET", "/v1/topics/t/subscribe?name=" + theirs + "&ack=auto", "", RoleAdmin, 200, RoleRead},
				{"DELETE", "/v1/cursors/" + theirs, "", RoleAdmin, 200, RoleConsume},
			} {
				served := holds(c.role, rt.need)
				want := rt.status
				if !served {
					want = 403
				}
				records := written()
				r := as.do(rt.method, rt.path, rt.body)
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
				if rt.route != RoleNone && !holds(c.role, rt.route) {
					need = rt.route
				} else if rt.route != RoleNone && need == RoleAdmin && rt.route == RoleRead && !holds(c.role, RoleConsume) {
					need = RoleConsume // ack=auto
				}
				if need == RoleAdmin && c.role == RoleConsume && strings.Contains(rt.path, theirs) {
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
			if c.role < RoleConsume || c.role == RolePublish {
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
	me := Caller{Known: true, UID: 1000, GID: 1000, Groups: []uint32{1000, 27, 44}}
	for _, tc := range []struct {
		name string
		cfg  Config
		c    Caller
		want []Role // the roles held, of read, consume, publish, admin
	}{
		{"no lists: every role but admin", Config{}, me, []Role{RoleRead, RoleConsume, RolePublish}},
		{"no lists, credentials unknown", Config{}, Caller{}, []Role{RoleRead, RoleConsume, RolePublish}},
		{"root", Config{AllowUIDs: []uint32{5}}, Caller{Known: true}, []Role{RoleRead, RoleConsume, RolePublish, RoleAdmin}},
		{"the daemon's own user", Config{AllowUIDs: []uint32{5}}, Caller{Known: true, UID: self}, []Role{RoleRead, RoleConsume, RolePublish, RoleAdmin}},
		{"publishers named: consume follows", Config{AllowUIDs: []uint32{5}}, me, []Role{RoleRead}},
		{"a publisher consumes by default", Config{AllowUIDs: []uint32{1000}}, me, []Role{RoleRead, RoleConsume, RolePublish}},
		{"consumers named apart", Config{AllowUIDs: []uint32{1000}, ConsumeUIDs: []uint32{5}}, me, []Role{RoleRead, RolePublish}},
		{"a consumer by a supplementary group", Config{AllowUIDs: []uint32{5}, ConsumeGIDs: []uint32{44}}, me, []Role{RoleRead, RoleConsume}},
		{"readers named: writers follow", Config{ReadUIDs: []uint32{5}}, me, nil},
		{"a reader may write when no writer is named", Config{ReadGIDs: []uint32{27}}, me, []Role{RoleRead, RoleConsume, RolePublish}},
		{"readers named, publishers open to the reader list only", Config{ReadUIDs: []uint32{5}, AllowUIDs: []uint32{1000}}, me, []Role{RoleRead, RoleConsume, RolePublish}},
		{"admin by gid", Config{AllowUIDs: []uint32{5}, AdminGIDs: []uint32{1000}}, me, []Role{RoleRead, RoleConsume, RolePublish, RoleAdmin}},
		{"credentials unknown: refused where a list is named", Config{AllowUIDs: []uint32{1000}}, Caller{UID: 1000}, []Role{RoleRead}},
	} {
		r := newRoles(tc.cfg, self)
		var got []Role
		for _, role := range []Role{RoleRead, RoleConsume, RolePublish, RoleAdmin} {
			if r.has(tc.c, role) {
				got = append(got, role)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
		if !r.has(tc.c, RoleNone) {
			t.Errorf("%s: health refused", tc.name)
		}
	}
}

// TestMemberBound checks --max-members-per-uid with a real uid: while the
// user holds its one member, a second is 429 too_many; once the first
// leaves, it may join again. Root, an admin, is not counted.
func TestMemberBound(t *testing.T) {
	needRoot(t)
	const user = 61050
	cfg := roleConfig(t)
	cfg.MaxMembersPerUID = 1
	td := startDaemon(t, cfg)
	held := func() int {
		td.d.members.mu.Lock()
		defer td.d.members.mu.Unlock()
		return td.d.members.byUID[user]
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
