package group

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store"

	"github.com/cachecast/cachecast/store/record"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunLeakFree(m, time.Second)) }

func TestAllocate(t *testing.T) {
	for _, tc := range []struct {
		queues, n int
		want      [][]int
	}{
		{16, 1, [][]int{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}},
		{16, 3, [][]int{{0, 1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}, {11, 12, 13, 14, 15}}},
		{8, 4, [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
		{2, 3, [][]int{{0}, {1}, nil}},
		{5, 2, [][]int{{0, 1, 2}, {3, 4}}},
	} {
		var all []int
		for i := range tc.n {
			got := allocate(tc.queues, tc.n, i)
			if !slices.Equal(got, tc.want[i]) {
				t.Errorf("allocate(%d, %d, %d) = %v, want %v", tc.queues, tc.n, i, got, tc.want[i])
			}
			all = append(all, got...)
		}
		if len(all) != tc.queues {
			t.Errorf("allocate(%d, %d, *) covers %v", tc.queues, tc.n, all)
		}
	}
	if got := allocate(16, 3, 3); got != nil {
		t.Errorf("an index past the consumers got %v", got)
	}
}

func TestParseID(t *testing.T) {
	id := ID{Origin: 0xdeadbeef, Seq: 42}
	if got, err := ParseID(id.String()); err != nil || got != id {
		t.Fatalf("ParseID(%q) = %v, %v", id.String(), got, err)
	}
	for _, bad := range []string{"", "-", "00000000deadbeef", "deadbeef-1", "00000000deadbeef-0",
		"00000000deadbeef-x", "0000000zdeadbeef-1", "00000000deadbeef--1"} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) took it", bad)
		}
	}
}

func TestPositionRoundTrip(t *testing.T) {
	p := position{Epoch: 3, From: 99, Owner: 12, Done: [nSources]vector{{1: 5, 0xffffffffffffffff: 7}, {}},
		Failed: map[string]int{failedKey(srcRetry, ID{1, 9}): 2}}
	b, err := encodePosition(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodePosition(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Epoch != 3 || got.From != 99 || got.Owner != 12 || got.Done[0][1] != 5 || got.Done[0][0xffffffffffffffff] != 7 ||
		len(got.Done[1]) != 0 || got.Failed["1:0000000000000001-9"] != 2 {
		t.Fatalf("round trip: %s -> %+v", b, got)
	}
	for _, bad := range []string{``, `{`, `{"done":[{"xyz":1}]}`, `{"done":[{"1":1}]}`, `{"epoch":-1}`} {
		if _, err := decodePosition([]byte(bad)); err == nil {
			t.Errorf("decodePosition(%q) took it", bad)
		}
	}
}

func TestParseFailedKey(t *testing.T) {
	for _, tc := range []struct {
		k   string
		src int
		id  ID
		ok  bool
	}{
		{"0:00000000000000ff-3", 0, ID{0xff, 3}, true},
		{"1:00000000000000ff-3", 1, ID{0xff, 3}, true},
		{"2:00000000000000ff-3", 0, ID{}, false},
		{"00000000000000ff-3", 0, ID{}, false},
		{"0:ff-3", 0, ID{}, false},
		{"", 0, ID{}, false},
	} {
		src, id, ok := parseFailedKey(tc.k)
		if ok != tc.ok || ok && (src != tc.src || id != tc.id) {
			t.Errorf("parseFailedKey(%q) = %d, %v, %v", tc.k, src, id, ok)
		}
		if ok && failedKey(src, id) != tc.k {
			t.Errorf("failedKey(%d, %v) = %q, want %q", src, id, failedKey(src, id), tc.k)
		}
	}
}

func FuzzDecodePosition(f *testing.F) {
	f.Add([]byte(`{"epoch":1,"from_hlc":5,"done":[{"00000000deadbeef":3},{}]}`))
	f.Add([]byte(`{"done":[null,null]}`))
	f.Add([]byte(`{"epoch":2,"owner":7,"done":[{},{}],"failed":{"0:00000000000000ff-3":2}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodePosition(b)
		if err != nil {
			return
		}
		b2, err := encodePosition(p)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", p, err)
		}
		p2, err := decodePosition(b2)
		if err != nil || p2.Epoch != p.Epoch || p2.From != p.From || p2.Owner != p.Owner || !maps.Equal(p2.Failed, p.Failed) {
			t.Fatalf("round trip of %q: %+v / %+v, %v", b, p, p2, err)
		}
		for src := range nSources {
			for o, s := range p.Done[src] {
				if s > 0 && p2.Done[src][o] != s {
					t.Fatalf("origin %x: %d became %d", o, s, p2.Done[src][o])
				}
			}
		}
	})
}

func FuzzParseID(f *testing.F) {
	f.Add("00000000deadbeef-42")
	f.Add("ffffffffffffffff-18446744073709551615")
	f.Add("x-1")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			return
		}
		if id.Seq == 0 {
			t.Fatalf("ParseID(%q) gave seq 0", s)
		}
		if again, err := ParseID(id.String()); err != nil || again != id {
			t.Fatalf("%q -> %v -> %q -> %v, %v", s, id, id.String(), again, err)
		}
	})
}

// rig is a manager on a store held in memory (memStore), writing straight
// to it. The store outlives the manager: close then open is the node's
// restart.
type rig struct {
	t   *testing.T
	st  *memStore
	m   *Manager
	cfg Config
}

func newRig(t *testing.T, edit func(*Config)) *rig {
	t.Helper()
	r := &rig{t: t, st: newMemStore(0xc0ffee)}
	r.open(edit)
	t.Cleanup(func() {
		r.close()
		r.st.Close()
	})
	return r
}

func (r *rig) open(edit func(*Config)) {
	r.t.Helper()
	r.cfg = Config{
		Store: r.st,
		Write: func(_ context.Context, msgs []record.Message) error {
			_, err := r.st.PublishBatch(msgs)
			return err
		},
		Interval:       20 * time.Millisecond,
		CommitInterval: 50 * time.Millisecond,
	}
	if edit != nil {
		edit(&r.cfg)
	}
	var err error
	if r.m, err = New(r.cfg); err != nil {
		r.t.Fatal(err)
	}
}

// close stops the manager, as the node's stop does.
func (r *rig) close() {
	if r.m != nil {
		r.m.Close()
		r.m = nil
	}
}

func (r *rig) publish(topic, key, value, tag string) ID {
	r.t.Helper()
	res, err := r.st.PublishBatch([]record.Message{{Topic: topic, Key: key, Value: []byte(value), Tag: tag}})
	if err != nil {
		r.t.Fatal(err)
	}
	return ID{res[0].Origin, res[0].Seq}
}

// next waits for one delivery of mb.
func next(t *testing.T, mb *Member, buf *[]Delivery) Delivery {
	t.Helper()
	if len(*buf) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ds, err := mb.Next(ctx)
		if err != nil {
			t.Fatalf("member %d: %v", mb.ID, err)
		}
		*buf = ds
	}
	d := (*buf)[0]
	*buf = (*buf)[1:]
	return d
}

// none checks that mb gets nothing for a while.
func none(t *testing.T, mb *Member, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if ds, err := mb.Next(ctx); err == nil {
		t.Fatalf("member %d got %d more: first %s", mb.ID, len(ds), ds[0].Record.Value())
	}
}

func (r *rig) ack(topic, group string, ack, nack []ID) {
	r.t.Helper()
	if _, _, unknown, err := r.m.Ack(context.Background(), topic, group, ack, nack); err != nil || unknown > 0 {
		r.t.Fatalf("ack: %d unknown, %v", unknown, err)
	}
}

// TestLocalMembersShareOnce: three members of a group on one node get
// every message once between them, each key's messages in order and all
// on one member.
func TestLocalMembersShareOnce(t *testing.T) {
	r := newRig(t, nil)
	var members []*Member
	for range 3 {
		mb, err := r.m.Join("prices", "g", nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, mb)
	}
	const keys, perKey = 50, 40
	go func() {
		for i := range perKey {
			for k := range keys {
				r.publish("prices", fmt.Sprintf("k%d", k), fmt.Sprint(i), "")
			}
		}
	}()
	var (
		mu     sync.Mutex
		seen   = map[ID]int{}
		last   = map[string]int{}
		owner  = map[string]uint64{}
		errs   []string
		wg     sync.WaitGroup
		total  int
		doneCh = make(chan struct{})
		finish = sync.OnceFunc(func() { close(doneCh) })
	)
	for _, mb := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				ds, err := mb.Next(ctx)
				cancel()
				select {
				case <-doneCh:
					return
				default:
				}
				if err != nil {
					continue
				}
				var ids []ID
				mu.Lock()
				for _, d := range ds {
					k, v := string(d.Record.Key()), 0
					fmt.Sscan(string(d.Record.Value()), &v)
					seen[d.ID]++
					if o, ok := owner[k]; ok && o != mb.ID {
						errs = append(errs, fmt.Sprintf("key %s on members %d and %d", k, o, mb.ID))
					}
					owner[k] = mb.ID
					if l, ok := last[k]; ok && v != l+1 {
						errs = append(errs, fmt.Sprintf("key %s: %d after %d", k, v, l))
					}
					last[k] = v
					ids = append(ids, d.ID)
					total++
				}
				if total == keys*perKey {
					finish()
				}
				mu.Unlock()
				r.ack("prices", "g", ids, nil)
			}
		}()
	}
	select {
	case <-doneCh:
	case <-time.After(30 * time.Second):
		mu.Lock()
		t.Errorf("got %d of %d messages", total, keys*perKey)
		mu.Unlock()
		finish() // the members stop rather than wait forever
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[:min(5, len(errs))])
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%v delivered %d times", id, n)
		}
	}
	for _, mb := range members {
		none(t, mb, 100*time.Millisecond)
	}
}

// TestRetriesThenDeadLetterThenReplay: refused messages come back after
// each back-off, 1+MaxRetries deliveries in all, then land in the dead-
// letter topic with their reason and attempts; replay delivers them again.
func TestRetriesThenDeadLetterThenReplay(t *testing.T) {
	backoff := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}
	const maxRetries = 3
	r := newRig(t, func(c *Config) { c.MaxRetries = maxRetries; c.Backoff = backoff })
	mb, err := r.m.Join("orders", "billing", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	values := map[ID]string{}
	for i := range 3 {
		values[r.publish("orders", fmt.Sprintf("o-%d", i), fmt.Sprintf("pay %d", i), "eu")] = fmt.Sprintf("pay %d", i)
	}
	var buf []Delivery
	attempts := map[ID]int{}
	nacked := map[ID]time.Time{}
	for range len(values) * (1 + maxRetries) {
		d := next(t, mb, &buf)
		if values[d.ID] != string(d.Record.Value()) || d.Attempt != attempts[d.ID]+1 {
			t.Fatalf("delivery %+v (value %q) after %d attempts", d, d.Record.Value(), attempts[d.ID])
		}
		if d.Attempt > 1 {
			want := backoff[min(d.Attempt-2, len(backoff)-1)]
			if gap := time.Since(nacked[d.ID]); gap < want {
				t.Fatalf("%v: attempt %d came %v after the nack, want at least the back-off %v", d.ID, d.Attempt, gap, want)
			}
		}
		attempts[d.ID] = d.Attempt
		nacked[d.ID] = time.Now()
		r.ack("orders", "billing", nil, []ID{d.ID})
	}
	none(t, mb, 300*time.Millisecond)
	var dls []DeadLetter
	testkit.Eventually(t, 10*time.Second, "the dead letters", func() bool {
		dls, _, err = r.m.DeadLetters("orders", "billing", "", 10)
		return err == nil && len(dls) == len(values)
	})
	for _, dl := range dls {
		id, _ := ParseID(dl.ID)
		if values[id] == "" || dl.Reason != "nack" || dl.Attempts != 1+maxRetries || string(dl.Value) != values[id] ||
			dl.Tag != "eu" || dl.Topic != "orders" || dl.Group != "billing" {
			t.Fatalf("dead letter %+v", dl)
		}
		if got, err := r.m.DeadLetter("orders", "billing", dl.ID); err != nil || got.ID != dl.ID {
			t.Fatalf("DeadLetter(%s): %+v, %v", dl.ID, got, err)
		}
	}
	if page, next, err := r.m.DeadLetters("orders", "billing", "", 2); err != nil || len(page) != 2 || next != page[1].ID {
		t.Fatalf("a page of 2: %d, next %q, %v", len(page), next, err)
	}
	if _, err := r.m.DeadLetter("orders", "billing", "00000000000000aa-1"); err == nil {
		t.Fatal("an unknown dead letter was found")
	}
	if n, err := r.m.Replay(context.Background(), "orders", "billing", nil, true); err != nil || n != len(values) {
		t.Fatalf("Replay: %d, %v", n, err)
	}
	replayed := map[string]bool{}
	for range len(values) {
		d := next(t, mb, &buf)
		if d.Attempt != 1 || d.Topic != "orders" || replayed[string(d.Record.Value())] {
			t.Fatalf("replayed delivery %+v (%s)", d, d.Record.Value())
		}
		replayed[string(d.Record.Value())] = true
		r.ack("orders", "billing", []ID{d.ID}, nil)
	}
	for _, v := range values {
		if !replayed[v] {
			t.Errorf("%q was not replayed", v)
		}
	}
	if dls, _, _ := r.m.DeadLetters("orders", "billing", "", 10); len(dls) != 0 {
		t.Fatalf("after replay the dead letters are %+v", dls)
	}
	none(t, mb, 200*time.Millisecond)
}

// TestAckTimeoutRedelivers: a message nobody acknowledges comes back once
// the ack timeout and the back-off have passed.
func TestAckTimeoutRedelivers(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.AckTimeout = 150 * time.Millisecond
		c.MaxRetries = 1
		c.Backoff = []time.Duration{50 * time.Millisecond}
	})
	mb, err := r.m.Join("t", "g", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now() // before the first delivery, which the ack timeout counts from
	id := r.publish("t", "k", "v", "")
	var buf []Delivery
	d := next(t, mb, &buf)
	d2 := next(t, mb, &buf)
	if d.ID != id || d2.ID != id || d2.Attempt != 2 {
		t.Fatalf("deliveries %+v then %+v", d, d2)
	}
	if gap := time.Since(t0); gap < 200*time.Millisecond {
		t.Fatalf("redelivered after %v, before the ack timeout and back-off", gap)
	}
	r.ack("t", "g", []ID{id}, nil)
	none(t, mb, 400*time.Millisecond)
}

// TestResumeAfterRestart: a group restarted on the same store resumes
// after what was acknowledged, and a disconnected member's unacknowledged
// messages go to the next one.
func TestResumeAfterRestart(t *testing.T) {
	r := newRig(t, nil)
	mb, err := r.m.Join("t", "g", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		r.publish("t", fmt.Sprintf("k%d", i), "v", "")
	}
	var buf []Delivery
	var got []ID
	for range 10 {
		got = append(got, next(t, mb, &buf).ID)
	}
	// Ack every other one.
	var acked []ID
	for i, id := range got {
		if i%2 == 0 {
			acked = append(acked, id)
		}
	}
	r.ack("t", "g", acked, nil)
	mb.Close()
	r.close()
	r.open(nil)
	mb, err = r.m.Join("t", "g", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf = nil
	var again []ID
	for range 5 {
		again = append(again, next(t, mb, &buf).ID)
	}
	none(t, mb, 200*time.Millisecond)
	var want []ID
	for i, id := range got {
		if i%2 == 1 {
			want = append(want, id)
		}
	}
	sortIDs(again)
	sortIDs(want)
	if !slices.Equal(again, want) {
		t.Fatalf("after the restart got %v, want the unacknowledged %v", again, want)
	}
}

func sortIDs(ids []ID) {
	slices.SortFunc(ids, func(a, b ID) int {
		if a.Origin != b.Origin {
			return compare(a.Origin, b.Origin)
		}
		return compare(a.Seq, b.Seq)
	})
}

func compare(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestReset: a group reset to a time gets exactly the messages from that
// time on; to earliest all of them; to latest none; to an offset those
// from it.
func TestReset(t *testing.T) {
	r := newRig(t, nil)
	for i := range 5 {
		r.publish("t", fmt.Sprintf("a%d", i), "old", "")
	}
	time.Sleep(5 * time.Millisecond) // the HLC has millisecond resolution
	from := time.Now()
	time.Sleep(5 * time.Millisecond)
	for i := range 5 {
		r.publish("t", fmt.Sprintf("b%d", i), "new", "")
	}
	mb, err := r.m.Join("t", "g", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var buf []Delivery
	drain := func(n int) []string {
		t.Helper()
		var keys []string
		var ids []ID
		for range n {
			d := next(t, mb, &buf)
			keys = append(keys, string(d.Record.Key()))
			ids = append(ids, d.ID)
		}
		r.ack("t", "g", ids, nil)
		none(t, mb, 200*time.Millisecond)
		slices.Sort(keys)
		return keys
	}
	if got := drain(10); len(got) != 10 {
		t.Fatalf("a new group got %v, want all 10 messages", got)
	}
	for _, tc := range []struct {
		to   string
		want string
	}{
		{from.UTC().Format(time.RFC3339Nano), "b0 b1 b2 b3 b4"},
		{"earliest", "a0 a1 a2 a3 a4 b0 b1 b2 b3 b4"},
		{"7", "b2 b3 b4"},
		{"latest", ""},
	} {
		if _, err := r.m.Reset(context.Background(), "t", "g", tc.to); err != nil {
			t.Fatalf("reset to %s: %v", tc.to, err)
		}
		n := len(strings.Fields(tc.want))
		if got := strings.Join(drain(n), " "); got != tc.want {
			t.Errorf("reset to %s: got %q, want %q", tc.to, got, tc.want)
		}
	}
	if _, err := r.m.Reset(context.Background(), "t", "g", "yesterday"); err == nil {
		t.Fatal("reset to yesterday was taken")
	}
}

// TestTagFilter: a group with tags gets exactly the messages with one of
// them.
func TestTagFilter(t *testing.T) {
	r := newRig(t, nil)
	mb, err := r.m.Join("t", "g", []string{"eu", "us"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.m.Join("t", "g", []string{"asia"}, 0); err == nil {
		t.Fatal("a member with other tags joined")
	}
	want := map[string]bool{}
	for i, tag := range []string{"eu", "asia", "us", "", "eu", "euro"} {
		k := fmt.Sprintf("k%d", i)
		r.publish("t", k, "v", tag)
		if tag == "eu" || tag == "us" {
			want[k] = true
		}
	}
	var buf []Delivery
	for range len(want) {
		d := next(t, mb, &buf)
		if !want[string(d.Record.Key())] {
			t.Fatalf("got %s with tag %q", d.Record.Key(), d.Record.Tag())
		}
		delete(want, string(d.Record.Key()))
		r.ack("t", "g", []ID{d.ID}, nil)
	}
	none(t, mb, 200*time.Millisecond)
}

// TestMaxInflight: a member holds at most its max_inflight unacknowledged.
func TestMaxInflight(t *testing.T) {
	r := newRig(t, nil)
	mb, err := r.m.Join("t", "g", nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		r.publish("t", "k", fmt.Sprint(i), "")
	}
	var buf []Delivery
	var ids []ID
	for range 3 {
		ids = append(ids, next(t, mb, &buf).ID)
	}
	none(t, mb, 200*time.Millisecond)
	r.ack("t", "g", ids[:2], nil)
	for range 2 {
		next(t, mb, &buf)
	}
	none(t, mb, 200*time.Millisecond)
}

// TestFullMemberDoesNotStallOthers: a member that holds its max_inflight
// and acknowledges nothing does not hold up the other member of the group
// on the node; its own messages wait, in order, for room.
func TestFullMemberDoesNotStallOthers(t *testing.T) {
	r := newRig(t, nil)
	stuck, err := r.m.Join("t", "g", nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	busy, err := r.m.Join("t", "g", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the queues to be divided", func() bool {
		s := r.m.Status()
		return len(s) == 1 && len(s[0].Members) == 2 && len(s[0].Members[0].Queues) == 8 && len(s[0].Members[1].Queues) == 8
	})
	mine := map[int]bool{}
	for _, q := range r.m.Status()[0].Members[1].Queues {
		mine[q] = true
	}
	// 200 keys over the 16 queues: about half are busy's.
	const keys = 200
	want := 0
	for i := range keys {
		k := fmt.Sprintf("k%d", i)
		r.publish("t", k, "1", "")
		if mine[queueOf([]byte(k), 0, DefaultQueues)] {
			want++
		}
	}
	var buf []Delivery
	for range want {
		d := next(t, busy, &buf)
		r.ack("t", "g", []ID{d.ID}, nil)
	}
	none(t, busy, 100*time.Millisecond)
	// The stuck member got its 2; once it acks them the next come, in order.
	var sbuf []Delivery
	a, b := next(t, stuck, &sbuf), next(t, stuck, &sbuf)
	none(t, stuck, 100*time.Millisecond)
	r.ack("t", "g", []ID{a.ID, b.ID}, nil)
	c := next(t, stuck, &sbuf)
	if c.ID.Seq <= b.ID.Seq {
		t.Fatalf("after %v the parked %v came out of order", b.ID, c.ID)
	}
}

// TestDeadLetterWriteFails: when the dead-letter write fails (a full disk,
// say), the message is not delivered again; the write is tried again until
// it lands.
func TestDeadLetterWriteFails(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	r := newRig(t, func(c *Config) {
		write := c.Write
		c.Write = func(ctx context.Context, msgs []record.Message) error {
			if failing.Load() && strings.HasPrefix(msgs[0].Topic, "$dlq/") {
				return store.ErrDiskFull
			}
			return write(ctx, msgs)
		}
	})
	mb, err := r.m.Join("t", "g", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	id := r.publish("t", "k", "v", "")
	var buf []Delivery
	if d := next(t, mb, &buf); d.ID != id {
		t.Fatalf("got %+v", d)
	}
	r.ack("t", "g", nil, []ID{id}) // MaxRetries is 0: dead at once
	none(t, mb, 1500*time.Millisecond)
	if dls, _, _ := r.m.DeadLetters("t", "g", "", 10); len(dls) != 0 {
		t.Fatalf("dead letters while the writes fail: %+v", dls)
	}
	failing.Store(false)
	testkit.Eventually(t, 10*time.Second, "the dead letter", func() bool {
		dls, _, _ := r.m.DeadLetters("t", "g", "", 10)
		return len(dls) == 1 && dls[0].ID == id.String()
	})
	none(t, mb, 200*time.Millisecond)
}

// TestFailedAttemptsOutliveTheOwner: the failed attempts of a message are
// written with its queue's position, so after a restart (or on the next
// owner) the count goes on toward MaxRetries instead of starting over.
func TestFailedAttemptsOutliveTheOwner(t *testing.T) {
	edit := func(c *Config) { c.MaxRetries = 3; c.Backoff = []time.Duration{50 * time.Millisecond} }
	r := newRig(t, edit)
	mb, err := r.m.Join("t", "g", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	id := r.publish("t", "k", "v", "")
	var buf []Delivery
	for attempt := 1; attempt <= 2; attempt++ {
		if d := next(t, mb, &buf); d.ID != id || d.Attempt != attempt {
			t.Fatalf("delivery %+v, want attempt %d", d, attempt)
		}
		r.ack("t", "g", nil, []ID{id})
	}
	mb.Close()
	r.close()
	r.open(edit)
	mb, err = r.m.Join("t", "g", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf = nil
	for attempt := 3; attempt <= 4; attempt++ {
		if d := next(t, mb, &buf); d.ID != id || d.Attempt != attempt {
			t.Fatalf("after the restart: delivery %+v, want attempt %d", d, attempt)
		}
		r.ack("t", "g", nil, []ID{id})
	}
	testkit.Eventually(t, 10*time.Second, "the dead letter", func() bool {
		dls, _, _ := r.m.DeadLetters("t", "g", "", 10)
		return len(dls) == 1 && dls[0].Attempts == 4
	})
	none(t, mb, 200*time.Millisecond)
}

// TestStopCancelsAPendingWrite: a group's write that waits (for a replica
// that does not answer, say) gives up when the group stops, instead of
// holding the stop up; the final write of the positions still lands.
func TestStopCancelsAPendingWrite(t *testing.T) {
	var blocking atomic.Bool
	blocking.Store(true)
	entered := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	r := newRig(t, func(c *Config) {
		write := c.Write
		c.Write = func(ctx context.Context, msgs []record.Message) error {
			if msgs[0].Topic == OffsetsTopic && blocking.CompareAndSwap(true, false) {
				select {
				case entered <- struct{}{}:
				default:
				}
				select {
				case <-ctx.Done():
					cancelled <- struct{}{}
					return ctx.Err()
				case <-time.After(30 * time.Second): // without a cancel: far past the test's wait
				}
			}
			return write(ctx, msgs)
		}
	})
	mb, err := r.m.Join("t", "g", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.publish("t", "k", "v", "")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no positions written")
	}
	stopped := make(chan struct{})
	go func() {
		mb.Close() // the last member: the group stops
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the group's stop waits for a write it should have cancelled")
	}
	select {
	case <-cancelled:
	default:
		t.Fatal("the pending write was not cancelled")
	}
}
