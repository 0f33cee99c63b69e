package group

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

// memStore is a Store held in memory, one node's, for the unit tests: each
// topic's log a slice of records in publish order, the latest write of
// each key, the origins' vector. It takes plain writes and deletes (all the
// group writes, and what the tests publish); expiry, schedules, cancels
// and counters are the store's and refused here. Nothing is recycled, so
// a topic's offsets start at 0, and ResumeOffset is exact: the offset of
// the first message done does not cover (the store's may be earlier, as
// far as covered messages are mixed in). TestMemStoreMatchesTheStore
// holds it to the store's answers.
type memStore struct {
	origin uint64

	mu      sync.Mutex
	seq     uint64
	clock   *record.Clock
	logs    map[string][]record.Record
	values  map[string]map[string]view.Entry // topic -> key -> value in force
	vector  map[uint64]uint64
	changed chan struct{}
	closed  bool
}

func newMemStore(origin uint64) *memStore {
	return &memStore{origin: origin, clock: record.NewClock(nil), logs: map[string][]record.Record{},
		values: map[string]map[string]view.Entry{}, vector: map[uint64]uint64{}, changed: make(chan struct{})}
}

// errNotModelled refuses what the store does and memStore does not.
var errNotModelled = fmt.Errorf("%w: memStore takes plain writes and deletes only", store.ErrInvalid)

// PublishBatch stamps and appends ms, visible together.
func (s *memStore) PublishBatch(ms []record.Message) ([]store.Result, error) {
	for i := range ms {
		m := &ms[i]
		if m.ExpiresAt != 0 || m.EffectiveAt != 0 || m.Cancel || m.ExpiryOf.Origin != 0 || m.CountOn.Origin != 0 {
			return nil, errNotModelled
		}
		if err := m.Validate(); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	res := make([]store.Result, len(ms))
	for i := range ms {
		m := &ms[i]
		s.seq++
		st := record.Stamp{Origin: s.origin, Seq: s.seq, HLC: s.clock.Now()}
		rec := make(record.Record, m.EncodedSize())
		record.Encode(rec, m, st)
		s.logs[m.Topic] = append(s.logs[m.Topic], rec)
		keys := s.values[m.Topic]
		if keys == nil {
			keys = map[string]view.Entry{}
			s.values[m.Topic] = keys
		}
		if m.Delete {
			delete(keys, m.Key)
		} else {
			keys[m.Key] = view.Entry{Value: slices.Clone(m.Value), Tag: m.Tag, Stamp: st}
		}
		s.vector[s.origin] = s.seq
		res[i] = store.Result{Stamp: st, Durable: true}
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return res, nil
}

// Close ends the readers' waits: Next answers store.ErrClosed.
func (s *memStore) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.changed)
	}
}

func (s *memStore) Origin() uint64 { return s.origin }

func (s *memStore) Get(topic, key string) (view.Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.values[topic][key]
	return e, ok
}

func (s *memStore) Keys(topic, prefix, after string, limit int) []string {
	s.mu.Lock()
	var keys []string
	for k := range s.values[topic] {
		if strings.HasPrefix(k, prefix) && k > after {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	slices.Sort(keys)
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit]
	}
	return keys
}

func (s *memStore) Topics() []view.TopicInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []view.TopicInfo
	for name, log := range s.logs {
		out = append(out, view.TopicInfo{Name: name, Keys: len(s.values[name]), Messages: uint64(len(log))})
	}
	slices.SortFunc(out, func(a, b view.TopicInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (s *memStore) Vector() map[uint64]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.vector)
}

func (s *memStore) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *memStore) TopicEnd(topic string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64(len(s.logs[topic]))
}

func (s *memStore) ResumeOffset(topic string, done map[uint64]uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	log := s.logs[topic]
	for off, r := range log {
		if r.Seq() > done[r.Origin()] {
			return uint64(off)
		}
	}
	return uint64(len(log))
}

func (s *memStore) NewTopicReader(topic string, start store.Start, tags []string) (TopicReader, error) {
	if topic == "" {
		return nil, fmt.Errorf("%w: empty topic", store.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	r := &memReader{s: s, topic: topic, tags: tags}
	switch start.From {
	case store.FromLatest:
		r.off = uint64(len(s.logs[topic]))
	case store.FromEarliest:
	case store.FromOffset:
		r.off = start.Offset
	default:
		return nil, fmt.Errorf("%w: start %d (memStore)", store.ErrInvalid, start.From)
	}
	return r, nil
}

// memReader is memStore's TopicReader.
type memReader struct {
	s     *memStore
	topic string
	tags  []string
	off   uint64
}

func (r *memReader) Offset() uint64 { return r.off }

func (r *memReader) Close() {}

func (r *memReader) Next(ctx context.Context) (store.Delivery, error) {
	for {
		r.s.mu.Lock()
		closed, wait, log := r.s.closed, r.s.changed, r.s.logs[r.topic]
		r.s.mu.Unlock()
		if closed {
			return store.Delivery{}, store.ErrClosed
		}
		for ; r.off < uint64(len(log)); r.off++ {
			rec := log[r.off]
			if len(r.tags) == 0 || slices.Contains(r.tags, string(rec.Tag())) {
				r.off++
				return store.Delivery{Offset: r.off - 1, Record: rec.Clone()}, nil
			}
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return store.Delivery{}, ctx.Err()
		}
	}
}

// TestMemStoreMatchesTheStore holds memStore to the store: the same
// batches published to both (writes, tagged writes, deletes, over three
// topics) give the same keys, values, topics, ends and vector, readers
// from each start and tag filter give the same messages at the same
// offsets, Changed fires on a write, and ResumeOffset answers the first
// message done does not cover, where the store's may be earlier.
func TestMemStoreMatchesTheStore(t *testing.T) {
	opts := store.DefaultOptions(t.TempDir())
	opts.SegmentSize = 4 << 20
	st, err := store.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mem := newMemStore(st.Origin())
	defer mem.Close()
	both := []Store{StoreOf(st), mem}

	var batches [][]record.Message
	for i := range 40 {
		var b []record.Message
		for j := range 1 + i%4 {
			m := record.Message{Topic: []string{"a", "b", "c/x"}[(i+j)%3], Key: fmt.Sprintf("k%02d", (i*7+j)%25),
				Value: []byte(fmt.Sprintf("v%d-%d", i, j)), Tag: []string{"", "red", "blue"}[(i+2*j)%3]}
			if i%9 == 4 && j == 0 {
				m = record.Message{Topic: m.Topic, Key: m.Key, Delete: true}
			}
			b = append(b, m)
		}
		batches = append(batches, b)
	}
	changed := []<-chan struct{}{both[0].Changed(), both[1].Changed()}
	for _, b := range batches {
		if _, err := st.PublishBatch(slices.Clone(b)); err != nil {
			t.Fatal(err)
		}
		if _, err := mem.PublishBatch(slices.Clone(b)); err != nil {
			t.Fatal(err)
		}
	}
	for i, ch := range changed {
		select {
		case <-ch:
		default:
			t.Errorf("store %d: Changed not closed after a write", i)
		}
	}

	same := func(what string, f func(s Store) string) {
		t.Helper()
		if x, y := f(both[0]), f(both[1]); x != y {
			t.Errorf("%s:\n store    %s\n memStore %s", what, x, y)
		}
	}
	same("Topics", func(s Store) string { return fmt.Sprint(s.Topics()) })
	same("Vector", func(s Store) string { return fmt.Sprint(s.Vector()) })
	same("Origin", func(s Store) string { return fmt.Sprint(s.Origin()) })
	for _, topic := range []string{"a", "b", "c/x", "none"} {
		same(topic+" TopicEnd", func(s Store) string { return fmt.Sprint(s.TopicEnd(topic)) })
		for _, q := range []struct {
			prefix, after string
			limit         int
		}{{"", "", 0}, {"k1", "", 0}, {"", "k07", 3}, {"k2", "k20", 0}, {"x", "", 0}} {
			same(fmt.Sprintf("%s Keys%+v", topic, q), func(s Store) string { return fmt.Sprint(s.Keys(topic, q.prefix, q.after, q.limit)) })
		}
		for k := range 26 {
			key := fmt.Sprintf("k%02d", k)
			same(topic+" Get "+key, func(s Store) string {
				e, ok := s.Get(topic, key)
				return fmt.Sprintf("%v %q %q %d/%d", ok, e.Value, e.Tag, e.Stamp.Origin, e.Stamp.Seq)
			})
		}
		for _, start := range []store.Start{{From: store.FromEarliest}, {From: store.FromOffset, Offset: 5}, {From: store.FromLatest}} {
			for _, tags := range [][]string{nil, {"red"}, {"red", "blue"}} {
				same(fmt.Sprintf("%s read from %+v tags %v", topic, start, tags), func(s Store) string {
					return readAll(t, s, topic, start, tags)
				})
			}
		}
		for _, done := range []uint64{0, 10, 40, 1000} {
			d := map[uint64]uint64{st.Origin(): done}
			first := uint64(0) // the offset of the first message done does not cover, by reading
			for off, r := range readDeliveries(t, mem, topic, store.Start{From: store.FromEarliest}, nil) {
				if r.Record.Seq() > done {
					break
				}
				first = uint64(off) + 1
			}
			if got := mem.ResumeOffset(topic, d); got != first {
				t.Errorf("%s: memStore ResumeOffset(%d) = %d, want %d", topic, done, got, first)
			}
			if got := both[0].ResumeOffset(topic, d); got > first {
				t.Errorf("%s: store ResumeOffset(%d) = %d, past the first uncovered %d", topic, done, got, first)
			}
		}
	}
}

// readDeliveries reads topic from start to its end.
func readDeliveries(t *testing.T, s Store, topic string, start store.Start, tags []string) []store.Delivery {
	t.Helper()
	r, err := s.NewTopicReader(topic, start, tags)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // what is there, no wait
	var out []store.Delivery
	for {
		d, err := r.Next(ctx)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("reading %s: %v", topic, err)
			}
			return out
		}
		out = append(out, d)
	}
}

// readAll is readDeliveries said in a line, with the reader's end offset.
func readAll(t *testing.T, s Store, topic string, start store.Start, tags []string) string {
	t.Helper()
	var b strings.Builder
	for _, d := range readDeliveries(t, s, topic, start, tags) {
		fmt.Fprintf(&b, "%d:%s=%s/%s/%d ", d.Offset, d.Record.Key(), d.Record.Value(), d.Record.Tag(), d.Record.Seq())
	}
	return b.String()
}
