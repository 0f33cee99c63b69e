package command

import (
	"errors"

	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/wire"
)

// StoreError maps an error of the store (its sentinels, store.ErrFull
// and the rest) onto the typed errors both doors answer (a *wire.Error
// is itself): the one mapping for every write, read and cursor the doors
// pass to the node.
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
