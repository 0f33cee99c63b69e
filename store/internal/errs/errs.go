// Package errs holds the sentinel errors that the store's internal
// packages (segment, index, cursors, fsys) return and the store exports under the
// same names (store.ErrClosed is errs.ErrClosed); their meaning is
// documented there. The record format's own errors live in package record.
package errs

import "errors"

// The store's sentinels shared by its parts; see the store package for
// what each means.
var (
	ErrClosed      = errors.New("store: closed")
	ErrDiskFull    = errors.New("store: disk full")
	ErrRecycled    = errors.New("store: position recycled")
	ErrBeyondEnd   = errors.New("store: position beyond end")
	ErrBadPosition = errors.New("store: position does not start a record")
	ErrDuplicate   = errors.New("store: duplicate record")
	ErrOutOfOrder  = errors.New("store: record out of origin order")
	ErrIO          = errors.New("store: i/o error")
	ErrNotOwner    = errors.New("store: cursor owned by another user")
	ErrCursorLimit = errors.New("store: too many cursors")
	ErrNewerFormat = errors.New("store: data directory written by a newer cachecast")
)
