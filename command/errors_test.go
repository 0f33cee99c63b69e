package command

import (
	"fmt"
	"testing"

	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/wire"
)

func TestStoreErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err    error
		code   string
		status int
	}{
		{fmt.Errorf("x: %w", store.ErrFull), "store_full", 507},
		{fmt.Errorf("x: %w", store.ErrDiskFull), "disk_full", 507},
		{store.ErrTooLarge, "value_too_large", 413},
		{store.ErrInvalid, "bad_request", 400},
		{store.ErrClosed, "unavailable", 503},
		{store.ErrIO, "internal", 500},
		{wire.Errorf(wire.CodeForbidden, "no"), "forbidden", 403},
	} {
		e := StoreError(tc.err)
		if e.Code != tc.code || wire.HTTPStatus(e.Code) != tc.status {
			t.Errorf("%v -> %s %d; want %s %d", tc.err, e.Code, wire.HTTPStatus(e.Code), tc.code, tc.status)
		}
	}
	for _, code := range wire.Codes {
		if s := wire.HTTPStatus(code); s < 400 || code != wire.CodeInternal && s == 500 {
			t.Errorf("code %s has status %d", code, s)
		}
	}
}
