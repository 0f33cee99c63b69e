package httpapi

import (
	"errors"

	"github.com/cachecast/cachecast/group"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/wire"
)

// StoreError maps an error of the store onto the API's codes (a
// *wire.Error is itself); the Redis front door's adapter uses it too.
func StoreError(err error) *wire.Error {
	var ae *wire.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, store.ErrFull):
		return wire.Errorf(wire.CodeStoreFull, "%v", err)
	case errors.Is(err, store.ErrDiskFull):
		return wire.Errorf(wire.CodeDiskFull, "%v", err)
	case errors.Is(err, store.ErrCursorLimit):
		return wire.Errorf(wire.CodeTooMany, "%v", err)
	case errors.Is(err, store.ErrNotOwner):
		return wire.Errorf(wire.CodeForbidden, "%v; only its owner or an admin (--admin-uids, --admin-gids) may change it", err)
	case errors.Is(err, store.ErrTooLarge):
		return wire.Errorf(wire.CodeValueTooLarge, "%v", err)
	case errors.Is(err, store.ErrInvalid):
		return wire.Errorf(wire.CodeBadRequest, "%v", err)
	case errors.Is(err, store.ErrClosed):
		return wire.Errorf(wire.CodeUnavailable, "the daemon is shutting down")
	}
	return wire.Errorf(wire.CodeInternal, "%v", err)
}

// groupError maps an error of the group manager onto the API's codes.
func groupError(err error) *wire.Error {
	switch {
	case errors.Is(err, group.ErrNotFound):
		return wire.Errorf(wire.CodeNotFound, "%v", err)
	case errors.Is(err, group.ErrNotOwner):
		return wire.Errorf(wire.CodeForbidden, "%v", err)
	case errors.Is(err, group.ErrConflict):
		return wire.Errorf(wire.CodeConflict, "%v", err)
	case errors.Is(err, group.ErrInvalid):
		return wire.Errorf(wire.CodeBadRequest, "%v", err)
	case errors.Is(err, group.ErrClosed):
		return wire.Errorf(wire.CodeUnavailable, "the daemon is shutting down")
	}
	return StoreError(err)
}
