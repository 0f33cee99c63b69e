package wire

import (
	"fmt"
	"net/http"
	"strconv"
)

// Error codes of the local API: stable words clients branch on. The HTTP
// status of each is fixed (HTTPStatus).
const (
	CodeBadRequest          = "bad_request"
	CodeInvalidName         = "invalid_name"
	CodeBadJSON             = "bad_json"
	CodeBadBase64           = "bad_base64"
	CodeValueTooLarge       = "value_too_large"
	CodeBodyTooLarge        = "body_too_large"
	CodeNotFound            = "not_found"
	CodeConflict            = "conflict"
	CodeRouteNotFound       = "route_not_found"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeUnsupportedEncoding = "unsupported_encoding"
	CodeForbidden           = "forbidden"
	CodeStoreFull           = "store_full"
	CodeTooMany             = "too_many"
	CodeDiskFull            = "disk_full"
	CodeUnavailable         = "unavailable"
	CodeCatchingUp          = "catching_up"   // a read before the node caught up with its peers
	CodeNotPending          = "not_pending"   // a cancel of an instant with nothing pending
	CodeBusy                = "busy"          // a limit of the node (--max-connections, --max-streams, --max-body-memory)
	CodeFleetTooOld         = "fleet_too_old" // a write with time fields while an alive member runs an older build
	CodeTimeout             = "timeout"
	CodeInternal            = "internal"
)

// Codes lists every error code (the metrics show each, at zero).
var Codes = []string{
	CodeBadRequest, CodeInvalidName, CodeBadJSON, CodeBadBase64, CodeValueTooLarge, CodeBodyTooLarge,
	CodeNotFound, CodeConflict, CodeRouteNotFound, CodeMethodNotAllowed, CodeUnsupportedEncoding, CodeForbidden, CodeStoreFull, CodeDiskFull,
	CodeTooMany, CodeUnavailable, CodeCatchingUp, CodeNotPending, CodeBusy, CodeFleetTooOld, CodeTimeout, CodeInternal,
}

// HTTPStatus is the HTTP status of each error code; 500 for a code it
// does not know.
func HTTPStatus(code string) int {
	switch code {
	case CodeBadRequest, CodeInvalidName, CodeBadJSON, CodeBadBase64:
		return http.StatusBadRequest
	case CodeValueTooLarge, CodeBodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeNotFound, CodeRouteNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeUnsupportedEncoding:
		return http.StatusUnsupportedMediaType
	case CodeConflict, CodeNotPending, CodeFleetTooOld:
		return http.StatusConflict
	case CodeForbidden:
		return http.StatusForbidden
	case CodeStoreFull, CodeDiskFull:
		return http.StatusInsufficientStorage
	case CodeTooMany:
		return http.StatusTooManyRequests
	case CodeUnavailable, CodeCatchingUp, CodeBusy:
		return http.StatusServiceUnavailable
	case CodeTimeout:
		return http.StatusRequestTimeout
	}
	return http.StatusInternalServerError
}

// Error is an error the local API answers with: on the wire
// {"error":{"code":"...","message":"..."}}, with the status of its code.
// The daemon's front doors pass it around as an error.
type Error struct {
	Code    string
	Message string
	// CatchUp is the progress a catching_up error shows, as
	// "catch_up":{...} in the error object.
	CatchUp *CatchUpStatus
}

// Error is "code: message", as logs and wrapped errors show it.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf makes an Error of code with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// AppendError appends e's error object (without a newline).
func AppendError(b []byte, e *Error) []byte {
	b = append(b, `{"error":{"code":`...)
	b = AppendString(b, e.Code)
	b = append(b, `,"message":`...)
	b = AppendString(b, e.Message)
	if c := e.CatchUp; c != nil {
		b = append(b, `,"catch_up":{"phase":`...)
		b = AppendString(b, c.Phase)
		b = append(b, `,"lag_records":`...)
		b = strconv.AppendUint(b, c.LagRecords, 10)
		b = append(b, '}')
	}
	return append(b, "}}"...)
}
