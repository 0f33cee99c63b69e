package httpapi

import (
	"errors"

	"github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/group"
	"github.com/cachecast/cachecast/wire"
)

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
	return command.StoreError(err)
}
