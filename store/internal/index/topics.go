package index

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// Topics is the set of topic indexes of a store (see set for the
// concurrency contract).
type Topics struct {
	set[string, *Topic]
	// prepMu guards prepared, the indexes Prepare made ahead of their
	// first Append, and is held while an index is created, so that
	// Prepare and Append never make the same one twice.
	prepMu   sync.Mutex
	prepared map[string]*Topic
}

// Topic is the index of one topic. Its methods are safe concurrently
// with the writer appending to it.
type Topic struct {
	name string
	one
}

func (ti *Topic) base() *one    { return &ti.one }
func (ti *Topic) label() string { return fmt.Sprintf("topic %q", ti.name) }

// OpenTopics opens (creating if needed) the topic indexes in dir
// (the store's <data>/index/topic). chunkEntries is the most entries per
// chunk file (0: 1<<20, 24 MiB; the first files are smaller, see
// firstIndexChunkEntries); maxMapped bounds the chunks mapped at once per
// topic.
func OpenTopics(dir string, chunkEntries, maxMapped int, log *zap.Logger) (*Topics, error) {
	t := &Topics{}
	if err := t.init(dir, topicEntrySize, chunkEntries, maxMapped, log); err != nil {
		return nil, err
	}
	err := t.load(t.topicOf, func(topic string, a *array) *Topic { return &Topic{name: topic, one: one{arr: a}} })
	if err != nil {
		return nil, err
	}
	return t, nil
}

// topicOf names the topic whose index lives in the directory de, or logs
// why de is none.
func (t *Topics) topicOf(de os.DirEntry) (string, bool) {
	name := de.Name()
	if !de.IsDir() {
		if !strings.HasSuffix(name, topicNameSuffix) && !strings.HasSuffix(name, fsys.TmpSuffix) {
			t.log.Warn("unexpected file in the topic index directory", zap.String("path", filepath.Join(t.dir, name)))
		}
		return "", false
	}
	topic, ok := parseTopicDirName(name)
	if strings.HasPrefix(name, "#") {
		b, err := os.ReadFile(filepath.Join(t.dir, name+topicNameSuffix))
		ok = err == nil && len(b) > 0 && topicDirName(string(b)) == name
		topic = string(b)
	}
	if !ok {
		t.log.Warn("unexpected directory in the topic index directory", zap.String("path", filepath.Join(t.dir, name)))
	}
	return topic, ok
}

// Append adds e to the index of topic and returns its offset in the topic.
// Positions must increase along a topic: an entry at or before the topic's
// last position is refused with ErrDuplicate (so that re-indexing the log
// from an earlier point skips what is already indexed). It does not
// allocate unless the topic is new. Writer only.
func (t *Topics) Append(topic []byte, e Entry) (uint64, error) {
	es := [1]Entry{e}
	return t.AppendAll(topic, es[:])
}

// appendRun is how many entries AppendAll encodes and publishes at once.
const appendRun = 16

// AppendAll is Append of each of es, whose positions must ascend (a
// publish's records of one topic): the entries are published together,
// appendRun at a time, and it returns the offset of the first. Nothing
// is written when the first is at or before the topic's last position
// (ErrDuplicate) or the positions do not ascend.
func (t *Topics) AppendAll(topic []byte, es []Entry) (uint64, error) {
	if t.closed.Load() {
		return 0, errs.ErrClosed
	}
	for i, e := range es {
		if e.Pos < 0 || i > 0 && e.Pos <= es[i-1].Pos {
			return 0, fmt.Errorf("%w: index entry at position %d (entry %d of %d)", record.ErrInvalid, e.Pos, i, len(es))
		}
	}
	if len(es) == 0 {
		return 0, fmt.Errorf("%w: no index entries", record.ErrInvalid)
	}
	ti := t.m[string(topic)]
	created := false
	if ti == nil {
		// Held until the topic is published below, so that no Prepare
		// makes its index again meanwhile.
		t.prepMu.Lock()
		defer t.prepMu.Unlock()
		var err error
		if ti, err = t.take(string(topic)); err != nil {
			return 0, err
		}
		created = true
	}
	if last := ti.last.Load(); es[0].Pos <= last {
		if created {
			ti.arr.close()
		}
		return 0, fmt.Errorf("%w: topic %q already indexed up to position %d, got %d", errs.ErrDuplicate, ti.name, last, es[0].Pos)
	}
	off := ti.arr.len()
	var buf [appendRun * topicEntrySize]byte
	for len(es) > 0 {
		run := es[:min(len(es), appendRun)]
		for i, e := range run {
			encodeIndexEntry(buf[i*topicEntrySize:], e)
		}
		if err := ti.arr.appendAll(buf[:len(run)*topicEntrySize]); err != nil {
			if created {
				ti.arr.close()
			}
			return 0, err
		}
		ti.last.Store(run[len(run)-1].Pos)
		if created {
			// Readers see a new topic only once it has its first entry.
			t.publish(ti.name, ti)
			created = false
		}
		es = es[len(run):]
	}
	return off, nil
}

// Prepare makes the index of topic ahead of its first Append, so that
// the files and fsyncs of a new topic's index happen before the store's
// writer lock rather than under it (every writer waited for them). A
// prepared index whose publish then fails keeps its (empty) files: the
// next open lists the topic with no messages, as after a crash between
// an index's creation and its first entry. Safe from any goroutine;
// nothing to do for a known topic.
func (t *Topics) Prepare(topic string) error {
	if t.closed.Load() {
		return errs.ErrClosed
	}
	if t.Get(topic) != nil {
		return nil
	}
	t.prepMu.Lock()
	defer t.prepMu.Unlock()
	if t.prepared[topic] != nil || t.Get(topic) != nil {
		return nil
	}
	ti, err := t.create(topic)
	if err != nil {
		return err
	}
	if t.prepared == nil {
		t.prepared = make(map[string]*Topic)
	}
	t.prepared[topic] = ti
	return nil
}

// take hands the writer the prepared index of topic, or creates it. The
// caller holds prepMu.
func (t *Topics) take(topic string) (*Topic, error) {
	if ti := t.prepared[topic]; ti != nil {
		delete(t.prepared, topic)
		return ti, nil
	}
	return t.create(topic)
}

// Close closes every index, the prepared ones too.
func (t *Topics) Close() error {
	t.prepMu.Lock()
	for name, ti := range t.prepared {
		ti.arr.close()
		delete(t.prepared, name)
	}
	t.prepMu.Unlock()
	return t.set.Close()
}

// create makes the index of a new topic.
func (t *Topics) create(topic string) (*Topic, error) {
	if topic == "" {
		return nil, fmt.Errorf("%w: empty topic", record.ErrInvalid)
	}
	name := topicDirName(topic)
	if strings.HasPrefix(name, "#") {
		if err := fsys.CreateAtomic(filepath.Join(t.dir, name+topicNameSuffix), fsys.WriteSynced([]byte(topic))); err != nil {
			return nil, err
		}
	}
	a, err := t.set.create(name, 0)
	if err != nil {
		return nil, err
	}
	ti := &Topic{name: topic, one: one{arr: a}}
	ti.last.Store(-1)
	return ti, nil
}

// Get returns the index of topic, nil if the topic has none. Safe from any
// goroutine.
func (t *Topics) Get(topic string) *Topic { return t.lookup(topic) }

// Has reports whether topic has an index, without allocating. Safe from
// any goroutine.
func (t *Topics) Has(topic []byte) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.m[string(topic)] != nil
}

// Holds reports whether topic's index has an entry at pos or after it
// (an Append of pos would be refused as a duplicate), without allocating.
// Safe from any goroutine.
func (t *Topics) Holds(topic []byte, pos int64) bool {
	t.mu.RLock()
	ti := t.m[string(topic)]
	t.mu.RUnlock()
	return ti != nil && ti.last.Load() >= pos
}

// Names lists the indexed topics, sorted.
func (t *Topics) Names() []string {
	t.mu.RLock()
	names := make([]string, 0, len(t.m))
	for name := range t.m {
		names = append(names, name)
	}
	t.mu.RUnlock()
	slices.Sort(names)
	return names
}

// Entry returns the entry at offset off: ErrRecycled below first(),
// ErrBeyondEnd at or after len(), ErrCorrupt for a hole.
func (ti *Topic) Entry(off uint64) (Entry, error) {
	var buf [topicEntrySize]byte
	if err := ti.arr.read(off, buf[:]); err != nil {
		return Entry{}, err
	}
	e, err := decodeIndexEntry(buf[:])
	if err != nil {
		return e, fmt.Errorf("%w (topic %q, offset %d)", err, ti.name, off)
	}
	return e, nil
}

// Len is the offset the topic's next message will get.
func (ti *Topic) Len() uint64 { return ti.arr.len() }

// First is the first offset the index still holds.
func (ti *Topic) First() uint64 { return ti.arr.first() }

// SearchHLC returns the first offset whose entry's HLC is at least h, by
// binary search. The answer is approximate: entries follow log order, and
// records from other origins may arrive with older HLCs than those
// before them, so HLCs along a topic are nearly, not strictly, ordered.
// Callers start there and scan on (a reader starting from a time delivers
// what follows, filtering nothing). On a read error it returns first(), so
// the caller's own scan meets the error.
func (ti *Topic) SearchHLC(h uint64) uint64 {
	first := ti.arr.first()
	lo, hi := first, ti.arr.len()
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := ti.Entry(mid)
		if err != nil {
			if errors.Is(err, errs.ErrRecycled) {
				// Retention dropped chunks under us: search what is left.
				lo = max(lo, ti.arr.first())
				continue
			}
			return first
		}
		if e.HLC >= h {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// SearchPos returns the first offset whose record lies at or after log
// position pos (Len() if none): positions increase along a topic.
func (ti *Topic) SearchPos(pos int64) (uint64, error) { return searchPos(ti.arr, pos) }
