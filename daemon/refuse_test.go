package daemon

import (
	"strings"
	"testing"
)

// TestRefusedWhatCannotBeKept (issue 31): a cursor set past the end of
// its topic is refused as from= past the end is (its subscriber would
// wait for nothing); an instant after year 9999 is refused at both doors
// (no date could show it, and `cachecast pending` broke on it); a group
// route's body past its fixed limit is not blamed on --max-body-size.
// The callers are another uid where the route has a role to check.
func TestRefusedWhatCannotBeKept(t *testing.T) {
	t.Parallel()
	needRoot(t)
	const uid = 61090
	td := startDaemon(t, roleConfig(t))
	for i := range 3 {
		td.put("t", "k"+string(rune('0'+i)), "v")
	}
	as := uidClient{t: t, sock: td.cfg.Socket, uid: uid}
	for _, c := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"topic":"t","offset":3}`, 200, `"offset":3`}, // the end: the next message
		{`{"topic":"t","offset":4}`, 400, `offset 4 is beyond the end of topic \"t\" on this node (its next offset is 3)`},
		{`{"topic":"empty","offset":1}`, 400, "beyond the end"},
	} {
		if r := as.do("POST", "/v1/cursors/c", c.body); r.status != c.status || !strings.Contains(string(r.body), c.want) {
			t.Errorf("cursor %s as uid %d: %d %s; want %d with %q", c.body, uid, r.status, r.body, c.status, c.want)
		}
	}
	for _, h := range [][2]string{{"Cachecast-Effective-At", "99999999999999999"}, {"Cachecast-Expires", "253402300800000"},
		{"Cachecast-Expires", "10000-01-01T00:00:00Z"}, {"Cachecast-Effective-At", "0"}} {
		r := td.do("PUT", "/v1/topics/t/keys/late", strings.NewReader("v"), h[0], h[1])
		if r.status != 400 || !strings.Contains(string(r.body), "from 1970 to 9999") {
			t.Errorf("PUT with %s: %d %s; want 400 naming the years", h, r.status, r.body)
		}
	}
	if r := td.do("PUT", "/v1/topics/t/keys/late", strings.NewReader("v"), "Cachecast-Expires", "253402300799999"); r.status != 200 {
		t.Errorf("PUT expiring at the last instant of 9999: %d %s", r.status, r.body)
	}
	sock := []string{"-s", td.d.RedisSocketPath()}
	for _, args := range [][]string{
		{"SET", "t:late", "v", "EFFECTIVEAT", "9223372036854775807"},
		{"SET", "t:late", "v", "PXAT", "253402300800000"},
		{"EXPIREAT", "t:late", "253402300800"},
	} {
		if out := redisCLIAs(t, uid, append(sock, args...)...); !strings.Contains(out, "after 9999-12-31T23:59:59.999Z") {
			t.Errorf("%v as uid %d: %q; want a refusal naming the end of year 9999", args, uid, out)
		}
	}
	big := strings.Repeat(`"x",`, 5_300_000/4)
	r := td.do("POST", "/v1/topics/t/groups/g/ack", strings.NewReader(`{"ids":[`+big+`"x"]}`))
	if r.status != 413 || strings.Contains(string(r.body), "--max-body-size") || !strings.Contains(string(r.body), "no flag sets it") {
		t.Errorf("an ack body of 5.3 MB: %d %s; want 413 naming its fixed limit, not --max-body-size", r.status, r.body)
	}
}
