package store

import (
	"errors"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/record"
)

// Sentinel errors of the store. Callers test for them with errors.Is; the
// store wraps them with the context (file, position) where one helps. The
// record format's are package record's (store.ErrCorrupt is
// record.ErrCorrupt), those its parts share are package errs's: one value
// under both names.
var (
	// ErrClosed is returned by every call made after Close.
	ErrClosed = errs.ErrClosed

	// ErrCorrupt means a record failed its length or CRC check. Recovery
	// truncates the log at the first such record; a read that meets one
	// (a page damaged after recovery) returns this error, never the bytes.
	ErrCorrupt = record.ErrCorrupt

	// ErrTooLarge means a record does not fit the limits: a field longer
	// than its length field can hold, or a record larger than a segment.
	ErrTooLarge = record.ErrTooLarge

	// ErrInvalid means a message or record breaks a rule that does not
	// depend on size: an empty topic, an unknown kind, a zero origin.
	ErrInvalid = record.ErrInvalid

	// ErrFull means the store reached its byte bound and the retention
	// policy forbids recycling (or nothing can be recycled yet: a segment
	// is still needed by a durable cursor, or by the snapshot and none
	// covered it within the write's wait for one). Nothing was written.
	ErrFull = errors.New("store: full")

	// ErrDiskFull means the file system refused to allocate a segment or
	// an index chunk (ENOSPC, EDQUOT, EFBIG). Nothing was written; the
	// append can be retried once space is freed.
	ErrDiskFull = errs.ErrDiskFull

	// ErrRecycled means the position asked for lies before the oldest
	// record the log retains.
	ErrRecycled = errs.ErrRecycled

	// ErrLost means a record of the log was set aside as damaged and has
	// not come back from a peer yet (see Lost): ReadOrigin stops at it.
	// A record given up (AcceptLost) reads as ErrRecycled instead.
	ErrLost = errors.New("store: record lost to a damaged log, not back yet")

	// ErrBeyondEnd means the position asked for lies at or past the end
	// of the log: there is no record there yet.
	ErrBeyondEnd = errs.ErrBeyondEnd

	// ErrBadPosition means the position does not start a record.
	ErrBadPosition = errs.ErrBadPosition

	// ErrDuplicate means a record with the same (origin, seq) is already
	// in the log. Receivers treat it as success.
	ErrDuplicate = errs.ErrDuplicate

	// ErrOutOfOrder means a record skips ahead in its origin's sequence:
	// the records between must be appended first.
	ErrOutOfOrder = errs.ErrOutOfOrder

	// ErrHeld means a record is stamped further ahead of the local wall
	// clock than MaxClockOffset (or follows such a record of its origin):
	// it is held in memory, not appended yet, and appended once the local
	// clock catches up (see ClockGuard in the package doc). Receivers
	// treat it as taken.
	ErrHeld = errors.New("store: record held until the local clock catches up with its stamp")

	// ErrClockAhead means a record was refused for its stamp: more than
	// HardClockOffsetFactor times MaxClockOffset ahead of the local wall
	// clock, or ahead while the held records are at their bound. Nothing
	// was appended; the origin's records are offered again by
	// anti-entropy.
	ErrClockAhead = errors.New("store: record stamped too far ahead of the local clock")

	// ErrIO wraps a failed read, write, sync or page fault on a file or
	// its map.
	ErrIO = errs.ErrIO

	// ErrNotOwner means a cursor belongs to another user: only its owner
	// (or a caller that overrides, an admin) may move or delete it.
	ErrNotOwner = errs.ErrNotOwner

	// ErrCursorLimit means a new cursor would pass MaxCursors or
	// MaxCursorsPerOwner. Nothing was written.
	ErrCursorLimit = errs.ErrCursorLimit

	// ErrLocked means another process holds the data directory.
	ErrLocked = errors.New("store: data directory in use")

	// ErrNewerFormat means the metafile's format version is newer than
	// this build reads: a newer build wrote the directory. Nothing was
	// read or changed; run that build again (a downgrade is refused
	// before it could take the newer format's bytes for damage).
	ErrNewerFormat = errs.ErrNewerFormat
)
