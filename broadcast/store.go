package broadcast

import (
	"io"

	"github.com/cachecast/cachecast/broadcast/digest"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
)

// Store is what a Node needs of this node's store: package store's Store
// is the one the daemon gives it; the package's unit tests run on an
// in-memory one (internal/memstore), as hashicorp/raft's run on its
// InmemStore. Every method is safe for concurrent use, and none blocks
// for long (the appends wait for their flush under the store's flush
// mode). The errors are package store's sentinels: a Node tells them
// apart with errors.Is.
type Store interface {
	// Origin is this node's origin ID, the origin of its own records.
	Origin() uint64
	// LastSeq is the highest seq of origin held without a gap (0: none);
	// Vector is LastSeq of every origin held: the version vector.
	LastSeq(origin uint64) uint64
	Vector() map[uint64]uint64
	// LogLast and LogVector are LastSeq and Vector except that a record
	// set aside as damaged does not stop them: how far this node can send
	// an origin's records on (store.Store.LogLast).
	LogLast(origin uint64) uint64
	LogVector() map[uint64]uint64
	// ReadOrigin calls fn with origin's records from seq from to seq to,
	// in order, each valid only while fn runs, and returns the seq after
	// the last one it passed. It stops early at the log's end; a seq no
	// longer held is store.ErrRecycled, a record set aside as damaged
	// store.ErrLost (next is its seq).
	ReadOrigin(origin, from, to uint64, fn func(record.Record) error) (next uint64, err error)
	// AppendRecord appends a record of any origin as its origin stamped
	// it: store.ErrDuplicate for one held already, store.ErrOutOfOrder for
	// one past a gap, store.ErrHeld or store.ErrClockAhead for one stamped
	// too far ahead, store.ErrCorrupt or store.ErrInvalid for bad bytes.
	AppendRecord(raw []byte) (store.Result, error)
	// Changed is closed at the next write to the store, OwnChanged at the
	// next of this node's own records. Take the channel, then look.
	Changed() <-chan struct{}
	OwnChanged() <-chan struct{}
	// SnapshotToVersion streams the view's snapshot for a peer's
	// bootstrap, in a snapshot version a peer of record version
	// maxVersion reads; Bootstrap applies a peer's as it is read, and
	// returns the origins it moved on.
	SnapshotToVersion(w io.Writer, maxVersion int) error
	Bootstrap(r io.Reader) (map[uint64]uint64, error)
	// ViewFromPeer says whether the view was lost at start (lost) and
	// still waits for a peer's snapshot (pending).
	ViewFromPeer() (lost, pending bool)
}

// vectorFeeder is a Store that names the origins whose vector entry
// changed (store.Store's VectorFeed), so that the digest sums are kept
// up to date at the cost of what changed.
type vectorFeeder interface {
	VectorFeed() *store.VectorFeed
}

// feedOf is st's change feed for the digest sums: its own, or, for a
// Store that keeps none, one that cannot tell, so that the sums read the
// whole vector at each frame (right, and cheap at a test's sizes).
func feedOf(st Store) digest.Feed {
	if f, ok := st.(vectorFeeder); ok {
		return f.VectorFeed()
	}
	return noFeed{}
}

// noFeed is the change feed of a Store that keeps none.
type noFeed struct{}

// Changes cannot tell: the caller reads the whole vector.
func (noFeed) Changes(func(origin uint64)) bool { return false }
