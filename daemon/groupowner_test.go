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

// TestGroupOwners (issue 31): a consumer group belongs to the uid whose
// member created it; another consumer may not join it, read its dead
// letters, or ack or nack a message delivered to the owner's member (an
// ack that settled it would lose it if the owner's worker crashed); the
// owner acks it. Both are real uids (setpriv).
func TestGroupOwners(t *testing.T) {
	needRoot(t)
	const owner, other = 61100, 61101
	cfg := roleConfig(t)
	cfg.ConsumeUIDs = []uint32{owner, other}
	td := startDaemon(t, cfg)
	id := strconv.Itoa(owner)
	sub := exec.Command("setpriv", "--reuid="+id, "--regid="+id, "--clear-groups", "curl", "-sS", "-N", "--max-time", "30",
		"--unix-socket", td.cfg.Socket, "http://cachecast/v1/topics/t/subscribe?mode=clustering&group=g")
	out, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Process.Kill(); _ = sub.Wait() })
	testkit.Eventually(t, 5*time.Second, "the owner's member", func() bool { return len(td.groupsOf()) == 1 })
	td.put("t", "k", "v")
	lines := bufio.NewScanner(out)
	var delivery map[string]any
	for delivery["id"] == nil && lines.Scan() {
		_ = json.Unmarshal(lines.Bytes(), &delivery)
	}
	msg, _ := delivery["id"].(string)
	if msg == "" {
		t.Fatalf("no delivery to the owner's member: %v", lines.Err())
	}
	them := uidClient{t: t, sock: td.cfg.Socket, uid: other}
	for _, c := range []struct{ method, path, body, want string }{
		{"POST", "/v1/topics/t/groups/g/ack", `{"ack":["` + msg + `"]}`, "was delivered to a member of uid " + id},
		{"POST", "/v1/topics/t/groups/g/ack", `{"nack":["` + msg + `"]}`, "nothing was settled"},
		{"GET", "/v1/topics/t/subscribe?mode=clustering&group=g", "", ""},
		{"GET", "/v1/topics/t/groups/g/dlq", "", "belongs to uid " + id},
	} {
		if r := them.do(c.method, c.path, c.body); r.status != 403 || !strings.Contains(string(r.body), c.want) {
			t.Errorf("%s %s as uid %d: %d %s; want 403 with %q", c.method, c.path, other, r.status, r.body, c.want)
		}
	}
	mine := uidClient{t: t, sock: td.cfg.Socket, uid: owner}
	if r := mine.do("POST", "/v1/topics/t/groups/g/ack", `{"ack":["`+msg+`"]}`); r.status != 200 || !strings.Contains(string(r.body), `"acked":1`) {
		t.Fatalf("the owner's ack: %d %s", r.status, r.body)
	}
	// The owner's worker goes: the group stays the owner's.
	if err := td.d.groups.CheckOwner(group.Owner{Name: "uid " + strconv.Itoa(other)}, "t", "g"); err == nil {
		t.Fatal("CheckOwner let another uid use the group")
	}
	_ = sub.Process.Kill()
	_ = sub.Wait()
	testkit.Eventually(t, 5*time.Second, "the member to leave", func() bool {
		return !hasMember(td)
	})
	if r := them.do("GET", "/v1/topics/t/subscribe?mode=clustering&group=g", ""); r.status != 403 {
		t.Errorf("another uid joining once the owner's member left: %d %s", r.status, r.body)
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
