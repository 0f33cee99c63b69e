package store

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/fsys"
)

// FlushMode says when an append counts as done.
type FlushMode int

const (
	// FlushAsync acknowledges an append once it is in the page cache; a
	// background flusher msyncs every FlushInterval or after FlushBytes of
	// new data. A process crash loses nothing; a machine crash or power
	// loss loses at most what was appended since the last flush.
	FlushAsync FlushMode = iota
	// FlushSync acknowledges an append only after a flush covers it. One
	// flush serves every writer waiting on it (group commit). Nothing
	// acknowledged is lost to a process crash, a machine crash or a power
	// loss, as far as the device honours its flush.
	FlushSync
)

// String returns "sync" or "async", as the flag spells it.
func (m FlushMode) String() string {
	if m == FlushSync {
		return "sync"
	}
	return "async"
}

// ParseFlushMode reads "sync" or "async". The error reads after the name
// of the flag or field that held s.
func ParseFlushMode(s string) (FlushMode, error) {
	switch s {
	case "async":
		return FlushAsync, nil
	case "sync":
		return FlushSync, nil
	}
	return 0, fmt.Errorf("must be \"sync\" or \"async\", got %q", s)
}

// FullPolicy says what the store does when the log reaches RetentionBytes.
type FullPolicy int

const (
	// FullRecycle recycles the oldest segments that the view snapshot and
	// every durable cursor have passed. When none has been passed yet the
	// append fails with ErrFull: nothing unconsumed is dropped silently.
	FullRecycle FullPolicy = iota
	// FullRefuse refuses new appends with ErrFull until retention by age
	// (or an operator) frees space.
	FullRefuse
)

// String returns "recycle" or "refuse", as the flag spells it.
func (p FullPolicy) String() string {
	if p == FullRefuse {
		return "refuse"
	}
	return "recycle"
}

// ParseFullPolicy reads "recycle" or "refuse". The error reads after the
// name of the flag or field that held s.
func ParseFullPolicy(s string) (FullPolicy, error) {
	switch s {
	case "recycle":
		return FullRecycle, nil
	case "refuse":
		return FullRefuse, nil
	}
	return 0, fmt.Errorf("must be \"recycle\" or \"refuse\", got %q", s)
}

// Options configure a store. DefaultOptions gives sane values; Validate
// checks them.
type Options struct {
	// Dir is the data directory; it is created if missing.
	Dir string
	// SegmentSize is the size of each log file, a multiple of the page
	// size. Larger segments mean fewer files and switches; smaller ones
	// finer-grained retention. It is fixed when the directory is created.
	SegmentSize int64
	// MaxMappedSegments bounds how many segments are mapped at once (the
	// seed's maxInMemSegments), and so the address space the log uses.
	MaxMappedSegments int
	// Flush is the durability of an acknowledged append.
	Flush FlushMode
	// FlushInterval is how often the async flusher runs.
	FlushInterval time.Duration
	// FlushBytes makes the async flusher run early once this many bytes
	// are unflushed.
	FlushBytes int64
	// RetentionBytes bounds the log's size in bytes; 0 means no bound but
	// the disk.
	RetentionBytes int64
	// RetentionAge recycles segments whose last write is older than this
	// once the snapshot and durable cursors have passed them; 0 keeps them.
	RetentionAge time.Duration
	// WhenFull is what reaching RetentionBytes does.
	WhenFull FullPolicy
	// SnapshotInterval is how often the view snapshot is written when the
	// log has grown since the last one; it bounds the replay on restart.
	SnapshotInterval time.Duration
	// IndexChunkEntries is the most entries in one index file: a topic
	// preallocates 24 bytes per entry (1.5 MiB by default), an origin 8
	// bytes per entry. A new topic or origin starts with a file of 512
	// entries, and each next file doubles up to this.
	IndexChunkEntries int
	// MaxCursors bounds the durable cursors (each takes 1 KiB of the
	// cursors file and may hold retention back); 0: no bound.
	MaxCursors int
	// MaxCursorsPerOwner bounds the cursors one user ID creates; 0: no
	// bound.
	MaxCursorsPerOwner int
	// MaxClockOffset bounds how far ahead of the local wall clock a
	// peer's record may be stamped and still be appended at once; one
	// further ahead is held until the clock catches up, or refused past
	// HardClockOffsetFactor times this (see "Clocks" in the package doc).
	// 0: no bound (the HLC follows any stamp).
	MaxClockOffset time.Duration
	// Now, when set, is the wall clock of the HLC and of the clock guard
	// (tests drive or skew it); nil: time.Now.
	Now func() time.Time
	// OnFlush, when set, is called after every flush that wrote something,
	// with how long it took (for a latency histogram). It runs on the
	// goroutine that flushed (the flusher's, or a caller of Flush or
	// Close), possibly on two at once, and must not block.
	OnFlush func(took time.Duration)
	// ViewFromPeers lets Open go on when the view cannot be rebuilt at
	// all from this node's own files (a damaged or missing snapshot whose
	// log was recycled since): the view starts with what the log still
	// holds and waits for a peer's snapshot (ViewFromPeer, Bootstrap).
	// Without it such an Open fails. For a node of a cluster.
	ViewFromPeers bool
	// Logger receives the store's logs; nil discards them.
	Logger *zap.Logger

	// fullWait, when set (by tests), is how long a write waits for the
	// snapshot that alone holds a full log back, in place of
	// defaultFullWait.
	fullWait time.Duration
	// segmentsPerFile, when set (by tests), is how many segments a
	// segment file of a new directory holds, in place of
	// segment.SlotsFor's choice.
	segmentsPerFile int64
}

// defaultFullWait bounds how long a write waits, when the log is at
// RetentionBytes and only the view's snapshot holds its oldest segment
// back, for the snapshot that frees it (one of 1M keys takes about 0.1 s,
// of 10M about 1 s) before it fails with ErrFull.
const defaultFullWait = 5 * time.Second

// DefaultOptions returns the defaults for a store in dir.
func DefaultOptions(dir string) Options {
	return Options{
		Dir:               dir,
		SegmentSize:       64 << 20,
		MaxMappedSegments: 16,
		Flush:             FlushAsync,
		FlushInterval:     100 * time.Millisecond,
		FlushBytes:        16 << 20,
		WhenFull:          FullRecycle,
		SnapshotInterval:  time.Minute,
		IndexChunkEntries: 1 << 16,
	}
}

// OptionError is the problem Validate finds with one option: the
// daemon reports it under the flag that sets the option.
type OptionError struct {
	// Option is the field of Options, as Go spells it (SegmentSize).
	Option string
	// Problem reads after the option's name: "must be at least 2, got 1".
	Problem string
}

func (e *OptionError) Error() string { return "store: " + e.Option + ": " + e.Problem }

// optionError is an *OptionError of option with the problem in format.
func optionError(option, format string, args ...any) error {
	return &OptionError{Option: option, Problem: fmt.Sprintf(format, args...)}
}

// Validate checks the options: these are the rules of the storage
// settings, which the daemon does not repeat. The error is an
// *OptionError.
func (o Options) Validate() error {
	switch {
	case o.Dir == "":
		return optionError("Dir", "must not be empty")
	case o.Flush != FlushAsync && o.Flush != FlushSync:
		return optionError("Flush", "must be FlushAsync or FlushSync, got %d", o.Flush)
	case o.FlushInterval <= 0:
		// The flusher's tick, which does the timed work under FlushSync too.
		return optionError("FlushInterval", "must be positive, got %v", o.FlushInterval)
	case o.FlushBytes < 0:
		return optionError("FlushBytes", "must not be negative (0: on the interval only), got %d", o.FlushBytes)
	}
	if err := o.validateSegments(); err != nil {
		return err
	}
	switch {
	case o.SnapshotInterval <= 0:
		return optionError("SnapshotInterval", "must be positive, got %v", o.SnapshotInterval)
	case o.WhenFull != FullRecycle && o.WhenFull != FullRefuse:
		return optionError("WhenFull", "must be FullRecycle or FullRefuse, got %d", o.WhenFull)
	case o.MaxCursors < 0:
		return optionError("MaxCursors", "must not be negative, got %d", o.MaxCursors)
	case o.MaxCursorsPerOwner < 0:
		return optionError("MaxCursorsPerOwner", "must not be negative, got %d", o.MaxCursorsPerOwner)
	case o.MaxClockOffset < 0:
		return optionError("MaxClockOffset", "must not be negative, got %v", o.MaxClockOffset)
	case o.IndexChunkEntries < 1024:
		return optionError("IndexChunkEntries", "must be at least 1024, got %d", o.IndexChunkEntries)
	}
	return nil
}

// validateSegments checks the segments' size, how many are mapped, and
// the retention bounds.
func (o Options) validateSegments() error {
	switch {
	case o.SegmentSize < 64<<10:
		return optionError("SegmentSize", "must be at least 64KiB, got %d", o.SegmentSize)
	case o.SegmentSize > 2<<30:
		return optionError("SegmentSize", "must be at most 2GiB, got %d", o.SegmentSize)
	case o.SegmentSize%int64(fsys.PageSize) != 0:
		return optionError("SegmentSize", "must be a multiple of the page size (%d), got %d", fsys.PageSize, o.SegmentSize)
	case o.MaxMappedSegments < 2:
		// One segment is written while another may still be read.
		return optionError("MaxMappedSegments", "must be at least 2, got %d", o.MaxMappedSegments)
	case o.RetentionBytes < 0:
		return optionError("RetentionBytes", "must not be negative, got %d", o.RetentionBytes)
	case o.RetentionBytes > 0 && o.RetentionBytes < 2*o.SegmentSize:
		return optionError("RetentionBytes", "must be 0 (no bound) or at least two segments (%d), got %d", 2*o.SegmentSize, o.RetentionBytes)
	case o.RetentionAge < 0:
		return optionError("RetentionAge", "must not be negative, got %v", o.RetentionAge)
	}
	return nil
}
