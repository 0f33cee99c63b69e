package client_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
)

// The consumer-group calls are tested against wireDaemon: canned answers
// by route, every request recorded, on a real Unix socket. These tests
// check the requests the client sends and how it reads the answers of
// the API's specification; what the daemon does with them is tested end
// to end against real daemons.

type wireDaemon struct {
	socket string

	mu      sync.Mutex
	answers map[string]cannedAnswer // by "METHOD /escaped/path"
	seen    []seenRequest
}

type cannedAnswer struct {
	status int
	header http.Header
	body   string
}

type seenRequest struct {
	method, path, query, ctype, body string
}

func newWireDaemon(t *testing.T) *wireDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "ccgroups") // short: socket paths are limited to 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &wireDaemon{socket: filepath.Join(dir, "api.sock"), answers: map[string]cannedAnswer{}}
	ln, err := net.Listen("unix", d.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(d.serve))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return d
}

// answer makes the route answer status and body from now on.
func (d *wireDaemon) answer(route string, status int, body string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers[route] = cannedAnswer{status: status, body: body}
}

// requests returns the requests served since the last call.
func (d *wireDaemon) requests() []seenRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.seen
	d.seen = nil
	return s
}

func (d *wireDaemon) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	d.mu.Lock()
	d.seen = append(d.seen, seenRequest{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Content-Type"), string(body)})
	a, ok := d.answers[r.Method+" "+r.URL.EscapedPath()]
	d.mu.Unlock()
	if !ok {
		a = cannedAnswer{status: 404, body: `{"error":{"code":"route_not_found","message":"no route"}}`}
	}
	for k, v := range a.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

const deadLetterJSON = `{"id":"00000000deadbeef-42","topic":"orders","group":"billing","key":"o-1","tag":"eu",
	"value_base64":"/wA=","delete":false,"reason":"timeout","attempts":5,"origin":"00000000deadbeef","seq":42,
	"hlc":"117703673222397952","time":"2026-11-30T05:12:01.582Z","dead_at":"2026-11-30T05:13:00.001Z"}`

var deadLetter = client.DeadLetter{
	ID: "00000000deadbeef-42", Topic: "orders", Group: "billing", Key: "o-1", Tag: "eu",
	Value: []byte{0xff, 0}, Reason: client.ReasonTimeout, Attempts: 5, Origin: 0xdeadbeef, Seq: 42, HLC: 117703673222397952,
	Time:   time.Date(2026, 11, 30, 5, 12, 1, 582e6, time.UTC),
	DeadAt: time.Date(2026, 11, 30, 5, 13, 0, 1e6, time.UTC),
}

// noRaw drops the dead letters' Raw, which TestDeadLetterJSON checks, for
// comparing the decoded fields.
func noRaw(ds []client.DeadLetter) []client.DeadLetter {
	for i := range ds {
		ds[i].Raw = nil
	}
	return ds
}

func noRaw1(d client.DeadLetter, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	d.Raw = nil
	return d, nil
}

func TestGroupCalls(t *testing.T) {
	d := newWireDaemon(t)
	c := client.New(d.socket)
	defer c.Close()
	const g = "/v1/topics/orders/groups/billing"
	tests := []struct {
		name   string
		call   func() (any, error)
		status int    // the canned answer's
		answer string // its body
		// The request expected: method and path (the answer's route), query, JSON body.
		method, path, query, body string
		want                      any
		err                       error // errors.Is the call's error
	}{
		{"ack and nack", func() (any, error) {
			return c.Ack(ctx(t), "orders", "billing", []string{"00000000deadbeef-1", "00000000deadbeef-2"}, []string{"0000000000000001-9"})
		}, 200, `{"acked":2,"nacked":1,"unknown":0}`,
			"POST", g + "/ack", "", `{"ack":["00000000deadbeef-1","00000000deadbeef-2"],"nack":["0000000000000001-9"]}`,
			client.AckResult{Acked: 2, Nacked: 1}, nil},
		{"ack only", func() (any, error) { return c.Ack(ctx(t), "orders", "billing", []string{"a-1"}, nil) },
			200, `{"acked":0,"nacked":0,"unknown":1}`, "POST", g + "/ack", "", `{"ack":["a-1"]}`,
			client.AckResult{Unknown: 1}, nil},
		{"nack only", func() (any, error) { return c.Ack(ctx(t), "orders", "billing", nil, []string{"a-1"}) },
			200, `{"acked":0,"nacked":1,"unknown":0}`, "POST", g + "/ack", "", `{"nack":["a-1"]}`,
			client.AckResult{Nacked: 1}, nil},
		{"ack without a member", func() (any, error) { return c.Ack(ctx(t), "orders", "billing", []string{"a-1"}, nil) },
			404, `{"error":{"code":"not_found","message":"no member of group billing"}}`, "POST", g + "/ack", "", `{"ack":["a-1"]}`,
			nil, client.ErrNotFound},
		{"dot names escaped", func() (any, error) { return c.Ack(ctx(t), "t.1", "..", []string{"a-1"}, nil) },
			200, `{"acked":1,"nacked":0,"unknown":0}`, "POST", "/v1/topics/t.1/groups/%2E%2E/ack", "", `{"ack":["a-1"]}`,
			client.AckResult{Acked: 1}, nil},
		{"reset earliest", func() (any, error) { return c.ResetGroup(ctx(t), "orders", "billing", client.FromEarliest) },
			200, `{"epoch":7}`, "POST", g + "/reset", "", `{"to":"earliest"}`, uint64(7), nil},
		{"reset to a time", func() (any, error) {
			return c.ResetGroup(ctx(t), "orders", "billing", client.FromTime(time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)))
		}, 200, `{"epoch":18446744073709551615}`, "POST", g + "/reset", "", `{"to":"2026-11-30T05:00:00.000Z"}`, uint64(1<<64 - 1), nil},
		{"reset refused", func() (any, error) { return c.ResetGroup(ctx(t), "orders", "billing", "soon") },
			400, `{"error":{"code":"bad_request","message":"to \"soon\""}}`, "POST", g + "/reset", "", `{"to":"soon"}`,
			nil, &client.APIError{Status: 400, Code: client.CodeBadRequest, Message: `to "soon"`}},
		{"groups", func() (any, error) { return c.Groups(ctx(t)) }, 200, `{"groups":[{"topic":"orders","group":"billing","queues":4,
			"nodes":[{"node":"00000000deadbeef","queues":[0,2]},{"node":"0000000000000001","queues":[1,3]}],
			"members":[{"id":"17","queues":[0,2],"inflight":3}],
			"backlog":10,"inflight":3,"delivered":100,"acked":97,"retries":2,"dead_letters":1}]}`,
			"GET", "/v1/groups", "", "",
			[]client.Group{{Topic: "orders", Group: "billing", Queues: 4,
				Nodes:   []client.GroupNode{{Node: "00000000deadbeef", Queues: []int{0, 2}}, {Node: "0000000000000001", Queues: []int{1, 3}}},
				Members: []client.GroupMember{{ID: "17", Queues: []int{0, 2}, Inflight: 3}},
				Backlog: 10, Inflight: 3, Delivered: 100, Acked: 97, Retries: 2, DeadLetters: 1}}, nil},
		{"no groups", func() (any, error) { return c.Groups(ctx(t)) }, 200, `{"groups":[]}`, "GET", "/v1/groups", "", "",
			[]client.Group{}, nil},
		{"groups of an older daemon", func() (any, error) { return c.Groups(ctx(t)) },
			404, `{"error":{"code":"route_not_found","message":"no route"}}`, "GET", "/v1/groups", "", "",
			nil, &client.APIError{Status: 404, Code: client.CodeRouteNotFound, Message: "no route"}},
		{"groups malformed", func() (any, error) { return c.Groups(ctx(t)) }, 200, `{"groups":{}}`, "GET", "/v1/groups", "", "",
			nil, client.ErrBadResponse},
		{"dead letters page", func() (any, error) {
			l, next, err := c.DeadLetters(ctx(t), "orders", "billing", "00000000deadbeef-41", 1)
			return []any{noRaw(l), next}, err
		}, 200, `{"dead_letters":[` + deadLetterJSON + `],"next":"00000000deadbeef-42"}`,
			"GET", g + "/dlq", "after=00000000deadbeef-41&limit=1", "",
			[]any{[]client.DeadLetter{deadLetter}, "00000000deadbeef-42"}, nil},
		{"dead letters, first page, last page", func() (any, error) {
			l, next, err := c.DeadLetters(ctx(t), "orders", "billing", "", 0)
			return []any{l, next}, err
		}, 200, `{"dead_letters":[],"next":""}`, "GET", g + "/dlq", "", "",
			[]any{[]client.DeadLetter{}, ""}, nil},
		{"dead letter", func() (any, error) { return noRaw1(c.DeadLetter(ctx(t), "orders", "billing", "00000000deadbeef-42")) },
			200, deadLetterJSON, "GET", g + "/dlq/00000000deadbeef-42", "", "", deadLetter, nil},
		{"dead letter text value", func() (any, error) { return noRaw1(c.DeadLetter(ctx(t), "orders", "billing", "00000000deadbeef-43")) },
			200, `{"id":"00000000deadbeef-43","value":"12.50","reason":"nack","attempts":1,"origin":"00000000deadbeef","seq":43}`,
			"GET", g + "/dlq/00000000deadbeef-43", "", "",
			client.DeadLetter{ID: "00000000deadbeef-43", Value: []byte("12.50"), Reason: client.ReasonNack, Attempts: 1, Origin: 0xdeadbeef, Seq: 43}, nil},
		{"dead letter not found", func() (any, error) { return c.DeadLetter(ctx(t), "orders", "billing", "0000000000000001-1") },
			404, `{"error":{"code":"not_found","message":"no dead letter"}}`, "GET", g + "/dlq/0000000000000001-1", "", "",
			nil, client.ErrNotFound},
		{"dead letter bad origin", func() (any, error) { return c.DeadLetter(ctx(t), "orders", "billing", "x-1") },
			200, `{"id":"x-1","origin":"not hex"}`, "GET", g + "/dlq/x-1", "", "", nil, client.ErrBadResponse},
		{"replay ids", func() (any, error) {
			return c.Replay(ctx(t), "orders", "billing", []string{"00000000deadbeef-42", "00000000deadbeef-43"}, false)
		}, 200, `{"replayed":2}`, "POST", g + "/dlq/replay", "", `{"ids":["00000000deadbeef-42","00000000deadbeef-43"]}`, 2, nil},
		{"replay all", func() (any, error) { return c.Replay(ctx(t), "orders", "billing", nil, true) },
			200, `{"replayed":0}`, "POST", g + "/dlq/replay", "", `{"all":true}`, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d.answer(tt.method+" "+tt.path, tt.status, tt.answer)
			got, err := tt.call()
			var wantAPI *client.APIError
			switch {
			case errors.As(tt.err, &wantAPI):
				var ae *client.APIError
				if !errors.As(err, &ae) || *ae != *wantAPI {
					t.Errorf("error %v, want %v", err, wantAPI)
				}
			case tt.err != nil:
				if !errors.Is(err, tt.err) {
					t.Errorf("error %v, want %v", err, tt.err)
				}
			case err != nil:
				t.Errorf("error %v", err)
			case !reflect.DeepEqual(got, tt.want):
				t.Errorf("got %#v\nwant %#v", got, tt.want)
			}
			reqs := d.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1: %+v", len(reqs), reqs)
			}
			r := reqs[0]
			if r.method != tt.method || r.path != tt.path || r.query != tt.query {
				t.Errorf("request %s %s?%s, want %s %s?%s", r.method, r.path, r.query, tt.method, tt.path, tt.query)
			}
			if tt.body == "" {
				if r.body != "" {
					t.Errorf("body %q, want none", r.body)
				}
			} else if !sameJSON(r.body, tt.body) || r.ctype != "application/json" {
				t.Errorf("body %s (%s), want %s (application/json)", r.body, r.ctype, tt.body)
			}
		})
	}
}

// TestGroupCallsRefused: calls that cannot be expressed on the wire, or
// that have nothing to send, send nothing.
func TestGroupCallsRefused(t *testing.T) {
	d := newWireDaemon(t)
	c := client.New(d.socket)
	defer c.Close()
	tests := []struct {
		name string
		call func() (any, error)
		want any   // the result when there is no error
		err  error // errors.Is
	}{
		{"ack nothing", func() (any, error) { return c.Ack(ctx(t), "t", "g", nil, []string{}) }, client.AckResult{}, nil},
		{"replay nothing", func() (any, error) { return c.Replay(ctx(t), "t", "g", nil, false) }, 0, nil},
		{"ack empty topic", func() (any, error) { return c.Ack(ctx(t), "", "g", []string{"a-1"}, nil) }, nil, client.ErrInvalidArgument},
		{"ack empty group", func() (any, error) { return c.Ack(ctx(t), "t", "", []string{"a-1"}, nil) }, nil, client.ErrInvalidArgument},
		{"reset nowhere", func() (any, error) { return c.ResetGroup(ctx(t), "t", "g", "") }, nil, client.ErrInvalidArgument},
		{"reset empty group", func() (any, error) { return c.ResetGroup(ctx(t), "t", "", "earliest") }, nil, client.ErrInvalidArgument},
		{"dead letters empty topic", func() (any, error) {
			l, _, err := c.DeadLetters(ctx(t), "", "g", "", 0)
			return l, err
		}, nil, client.ErrInvalidArgument},
		{"dead letter empty id", func() (any, error) { return c.DeadLetter(ctx(t), "t", "g", "") }, nil, client.ErrInvalidArgument},
		{"replay ids and all", func() (any, error) { return c.Replay(ctx(t), "t", "g", []string{"a-1"}, true) }, nil, client.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.call()
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Errorf("error %v, want %v", err, tt.err)
				}
			} else if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, %v; want %#v", got, err, tt.want)
			}
			if reqs := d.requests(); len(reqs) != 0 {
				t.Errorf("sent %+v", reqs)
			}
		})
	}
}

func TestSubscribeGroupOptions(t *testing.T) {
	d := newWireDaemon(t)
	c := client.New(d.socket)
	defer c.Close()
	tests := []struct {
		name  string
		opts  client.SubscribeOptions
		query string
	}{
		{"clustering", client.SubscribeOptions{Mode: client.ModeClustering, Group: "billing"}, "group=billing&mode=clustering"},
		{"clustering, all options", client.SubscribeOptions{Mode: client.ModeClustering, Group: "billing", Tags: []string{"a", "b"}, MaxInflight: 5},
			"group=billing&max_inflight=5&mode=clustering&tags=a%7C%7Cb"},
		{"broadcasting", client.SubscribeOptions{Mode: client.ModeBroadcasting, From: client.FromEarliest}, "from=earliest&mode=broadcasting"},
		{"group as a cursor name", client.SubscribeOptions{Group: "web-1"}, "group=web-1"},
		{"no max_inflight by default", client.SubscribeOptions{Mode: client.ModeClustering, Group: "g", MaxInflight: 0}, "group=g&mode=clustering"},
	}
	d.answer("GET /v1/topics/orders/subscribe", 200, "")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, err := c.Subscribe(ctx(t), "orders", tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			sub.Close()
			reqs := d.requests()
			if len(reqs) != 1 || reqs[0].query != tt.query {
				t.Errorf("requests %+v, want one with query %s", reqs, tt.query)
			}
		})
	}
}

func TestSubscribeClustering(t *testing.T) {
	d := newWireDaemon(t)
	c := client.New(d.socket)
	defer c.Close()
	d.answer("GET /v1/topics/orders/subscribe", 200,
		`{"offset":5,"topic":"orders","key":"o-1","tag":"eu","value":"12.50","delete":false,"origin":"00000000deadbeef","seq":42,"hlc":"117703673222397952","time":"2026-11-30T05:12:01.582Z","id":"00000000deadbeef-42","attempt":2,"queue":3}`+"\n"+
			`{"offset":6,"topic":"orders","key":"o-2","value":"x","origin":"00000000deadbeef","seq":43,"hlc":"117703673222397953","time":"2026-11-30T05:12:01.582Z","id":"00000000deadbeef-43","attempt":1,"queue":0}`+"\n")
	d.answer("POST /v1/topics/orders/groups/billing/ack", 200, `{"acked":1,"nacked":0,"unknown":0}`)
	d.answer("POST /v1/cursors/web-1", 200, `{"name":"web-1","topic":"orders","offset":6}`)

	sub, err := c.Subscribe(ctx(t), "orders", client.SubscribeOptions{Mode: client.ModeClustering, Group: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	want := []client.Event{
		{Offset: 5, Topic: "orders", Key: "o-1", Tag: "eu", Value: []byte("12.50"), Origin: 0xdeadbeef, Seq: 42, HLC: 117703673222397952,
			Time: time.Date(2026, 11, 30, 5, 12, 1, 582e6, time.UTC), ID: "00000000deadbeef-42", Attempt: 2, Queue: 3},
		{Offset: 6, Topic: "orders", Key: "o-2", Value: []byte("x"), Origin: 0xdeadbeef, Seq: 43, HLC: 117703673222397953,
			Time: time.Date(2026, 11, 30, 5, 12, 1, 582e6, time.UTC), ID: "00000000deadbeef-43", Attempt: 1},
	}
	for _, w := range want {
		ev := next(t, sub)
		if !eventEqual(ev, w) || ev.ID != w.ID || ev.Attempt != w.Attempt || ev.Queue != w.Queue {
			t.Fatalf("event %+v, want %+v", ev, w)
		}
	}
	if _, err := sub.Next(); err != io.EOF {
		t.Fatalf("end of the stream: %v", err)
	}
	d.requests()

	// Subscription.Ack acknowledges the id to the group.
	if err := sub.Ack(ctx(t), want[1]); err != nil {
		t.Fatal(err)
	}
	if reqs := d.requests(); len(reqs) != 1 || reqs[0].path != "/v1/topics/orders/groups/billing/ack" || !sameJSON(reqs[0].body, `{"ack":["00000000deadbeef-43"]}`) {
		t.Errorf("Ack sent %+v", reqs)
	}

	// In broadcasting mode a group is a cursor name: Ack advances the cursor.
	bsub, err := c.Subscribe(ctx(t), "orders", client.SubscribeOptions{Group: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer bsub.Close()
	d.requests()
	if err := bsub.Ack(ctx(t), want[0]); err != nil {
		t.Fatal(err)
	}
	if reqs := d.requests(); len(reqs) != 1 || reqs[0].path != "/v1/cursors/web-1" || !sameJSON(reqs[0].body, `{"topic":"orders","offset":6}`) {
		t.Errorf("Ack sent %+v", reqs)
	}
}

func TestDeadLetterJSON(t *testing.T) {
	b, err := json.Marshal(deadLetter)
	if err != nil {
		t.Fatal(err)
	}
	if !sameJSON(string(b), deadLetterJSON) {
		t.Errorf("marshaled %s\nwant %s", b, deadLetterJSON)
	}
	var back client.DeadLetter
	if err := json.Unmarshal(b, &back); err != nil || !bytes.Equal(back.Raw, b) {
		t.Errorf("decoded %s: Raw %s, %v; want the object as it came", b, back.Raw, err)
	}
	back.Raw = nil
	if !reflect.DeepEqual(back, deadLetter) {
		t.Errorf("round trip: %+v", back)
	}
	for _, bad := range []string{`{"value":"a","value_base64":"YQ=="}`, `{"time":"yesterday"}`, `{"dead_at":"now"}`, `{"attempts":"5"}`} {
		if err := json.Unmarshal([]byte(bad), &back); !errors.Is(err, client.ErrBadResponse) {
			t.Errorf("%s: %v, want ErrBadResponse", bad, err)
		}
	}
	if !bytes.Contains(b, []byte(`"value_base64":"/wA="`)) {
		t.Errorf("a binary value is not base64: %s", b)
	}
}

// FuzzDeadLetter: no input panics; what decodes survives a round trip
// through the wire form.
func FuzzDeadLetter(f *testing.F) {
	f.Add([]byte(deadLetterJSON))
	f.Add([]byte(`{"id":"a-1","value":"x","time":"2026-11-30T05:12:01+02:00","dead_at":"2026-11-30T05:12:01.123456Z"}`))
	f.Add([]byte(`{"origin":"ffffffffffffffff","seq":18446744073709551615,"attempts":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var d client.DeadLetter
		if err := json.Unmarshal(b, &d); err != nil {
			return
		}
		// RFC 3339 has years 0000..9999; an offset can carry a time
		// outside them once in UTC, which the wire cannot say.
		for _, tm := range []time.Time{d.Time, d.DeadAt} {
			if y := tm.UTC().Year(); y < 0 || y > 9999 {
				return
			}
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back client.DeadLetter
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("re-decoding %s: %v", out, err)
		}
		// Times keep milliseconds on the wire.
		if back.ID != d.ID || back.Topic != d.Topic || back.Group != d.Group || back.Key != d.Key || back.Tag != d.Tag ||
			!bytes.Equal(back.Value, d.Value) || back.Delete != d.Delete || back.Reason != d.Reason || back.Attempts != d.Attempts ||
			back.Origin != d.Origin || back.Seq != d.Seq || back.HLC != d.HLC ||
			!back.Time.Equal(d.Time.Truncate(time.Millisecond)) || !back.DeadAt.Equal(d.DeadAt.Truncate(time.Millisecond)) {
			t.Fatalf("round trip %+v -> %s -> %+v", d, out, back)
		}
	})
}
