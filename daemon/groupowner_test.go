package daemon

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/group"
	"github.com/cachecast/cachecast/internal/testkit"
)

// groupMember is a member of group g of topic t run as uid (curl under
// setpriv), its stream read line by line.
type groupMember struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
}

// joinGroup starts a member of group g of topic t as uid; the test's end
// stops it.
func joinGroup(t *testing.T, td *testDaemon, uid int, topic, g string) *groupMember {
	t.Helper()
	id := strconv.Itoa(uid)
	cmd := exec.Command("setpriv", "--reuid="+id, "--regid="+id, "--clear-groups", "curl", "-sS", "-N", "--max-time", "30",
		"--unix-socket", td.cfg.Socket, "http://cachecast/v1/topics/"+topic+"/subscribe?mode=clustering&group="+g)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &groupMember{cmd: cmd, lines: bufio.NewScanner(out)}
	t.Cleanup(m.stop)
	return m
}

// next is the id of the member's next delivery ("" if its stream ends).
func (m *groupMember) next() string {
	for m.lines.Scan() {
		var d struct{ ID string }
		if json.Unmarshal(m.lines.Bytes(), &d) == nil && d.ID != "" {
			return d.ID
		}
	}
	return ""
}

// stop ends the member's curl; a second call does nothing.
func (m *groupMember) stop() {
	if m.cmd.ProcessState == nil {
		_ = m.cmd.Process.Kill()
		_ = m.cmd.Wait()
	}
}

// ownedGroup starts a daemon where owner and other hold the consume role,
// makes group g of topic t owner's by joining it as owner, publishes a
// message and returns the id of the message delivered to owner's member.
func ownedGroup(t *testing.T, owner, other int) (*testDaemon, *groupMember, string) {
	t.Helper()
	cfg := roleConfig(t)
	cfg.ConsumeUIDs = []uint32{uint32(owner), uint32(other)}
	td := startDaemon(t, cfg)
	member := joinGroup(t, td, owner, "t", "g")
	testkit.Eventually(t, 5*time.Second, "the owner's member", func() bool { return len(td.groupsOf()) == 1 })
	td.put("t", "k", "v")
	msg := member.next()
	if msg == "" {
		t.Fatalf("no delivery to the owner's member: %v", member.lines.Err())
	}
	return td, member, msg
}

// TestGroupOwners (issue 31): a consumer group belongs to the uid whose
// member created it; another consumer may not join it, read its dead
// letters, or ack or nack a message delivered to the owner's member (an
// ack that settled it would lose it if the owner's worker crashed); the
// owner acks it. Both are real uids (setpriv).
func TestGroupOwners(t *testing.T) {
	needRoot(t)
	const owner, other = 61100, 61101
	td, member, msg := ownedGroup(t, owner, other)
	id := strconv.Itoa(owner)
	them := uidClient{t: t, sock: td.cfg.Socket, uid: other}
	refusedToOthers(t, them, msg, id)
	mine := uidClient{t: t, sock: td.cfg.Socket, uid: owner}
	if r := mine.do("POST", "/v1/topics/t/groups/g/ack", `{"ack":["`+msg+`"]}`); r.status != 200 || !strings.Contains(string(r.body), `"acked":1`) {
		t.Fatalf("the owner's ack: %d %s", r.status, r.body)
	}
	// The owner's worker goes: the group stays the owner's.
	if err := td.d.groups.CheckOwner(group.Owner{Name: "uid " + strconv.Itoa(other)}, "t", "g"); err == nil {
		t.Fatal("CheckOwner let another uid use the group")
	}
	member.stop()
	testkit.Eventually(t, 5*time.Second, "the member to leave", func() bool {
		return !hasMember(td)
	})
	if r := them.do("GET", "/v1/topics/t/subscribe?mode=clustering&group=g", ""); r.status != 403 {
		t.Errorf("another uid joining once the owner's member left: %d %s", r.status, r.body)
	}
}

// refusedToOthers checks that other may not settle msg of group g of
// topic t, delivered to a member of uid owner, join g, or read its dead
// letters: each is 403 naming the owner.
func refusedToOthers(t *testing.T, other uidClient, msg, owner string) {
	t.Helper()
	for _, c := range []struct{ method, path, body, want string }{
		{"POST", "/v1/topics/t/groups/g/ack", `{"ack":["` + msg + `"]}`, "was delivered to a member of uid " + owner},
		{"POST", "/v1/topics/t/groups/g/ack", `{"nack":["` + msg + `"]}`, "nothing was settled"},
		{"GET", "/v1/topics/t/subscribe?mode=clustering&group=g", "", "belongs to uid " + owner},
		{"GET", "/v1/topics/t/groups/g/dlq", "", "belongs to uid " + owner},
	} {
		if r := other.do(c.method, c.path, c.body); r.status != 403 || !strings.Contains(string(r.body), c.want) {
			t.Errorf("%s %s as uid %d: %d %s; want 403 with %q", c.method, c.path, other.uid, r.status, r.body, c.want)
		}
	}
}

// TestGroupOwnersOutliveRestart (issue 31): a group's owner is written
// with the group's state, so after the daemon restarts another uid is
// still refused the group (joining, its dead letters, acking what the
// owner's member holds), and the owner and an admin are served. The
// message delivered before the restart and never acked comes back to the
// owner's new member, and only the owner settles it.
func TestGroupOwnersOutliveRestart(t *testing.T) {
	needRoot(t)
	const owner, other = 61110, 61111
	td, member, msg := ownedGroup(t, owner, other)
	cfg := td.cfg
	td.stop()
	member.stop()

	td = startDaemon(t, cfg)
	them := uidClient{t: t, sock: cfg.Socket, uid: other}
	if r := them.do("GET", "/v1/topics/t/subscribe?mode=clustering&group=g", ""); r.status != 403 || !strings.Contains(string(r.body), "belongs to uid "+strconv.Itoa(owner)) {
		t.Fatalf("another uid joining the group after a restart: %d %s", r.status, r.body)
	}
	if r := td.do("GET", "/v1/topics/t/groups/g/dlq", nil); r.status != 200 {
		t.Errorf("an admin (root) reading the group's dead letters after a restart: %d %s", r.status, r.body)
	}
	member = joinGroup(t, td, owner, "t", "g")
	if again := member.next(); again != msg {
		t.Fatalf("the owner's member after the restart got %q; want the unacked %s again", again, msg)
	}
	refusedToOthers(t, them, msg, strconv.Itoa(owner))
	mine := uidClient{t: t, sock: cfg.Socket, uid: owner}
	if r := mine.do("GET", "/v1/topics/t/groups/g/dlq", ""); r.status != 200 {
		t.Errorf("the owner reading its dead letters: %d %s", r.status, r.body)
	}
	if r := mine.do("POST", "/v1/topics/t/groups/g/ack", `{"ack":["`+msg+`"]}`); r.status != 200 || !strings.Contains(string(r.body), `"acked":1`) {
		t.Fatalf("the owner's ack after the restart: %d %s", r.status, r.body)
	}
}

// hasMember reports whether a group has a member on td.
func hasMember(td *testDaemon) bool {
	for _, g := range td.groupsOf() {
		if len(g.Members) > 0 {
			return true
		}
	}
	return false
}
