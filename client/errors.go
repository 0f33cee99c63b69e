package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/cachecast/cachecast/wire"
)

// Sentinel errors of the client. Callers test for them with errors.Is.
var (
	// ErrNotFound means the daemon answered 404 not_found: the key, the
	// cursor or the topic does not exist. The error returned is an
	// *APIError that matches ErrNotFound under errors.Is.
	ErrNotFound = errors.New("client: not found")

	// ErrInvalidArgument means a call was refused before anything was
	// sent, because an argument cannot be expressed on the wire (an empty
	// topic or key in a path, for instance).
	ErrInvalidArgument = errors.New("client: invalid argument")

	// ErrBadResponse means the daemon's answer does not follow the wire
	// format: malformed JSON, a bad identity field, a header that does not
	// parse. It usually means the client and the daemon disagree on the
	// API version.
	ErrBadResponse = errors.New("client: malformed response")

	// ErrUnreachable means the client could not connect to the daemon's
	// socket (it does not exist, nobody listens on it, or permission was
	// denied). The wrapped error says which.
	ErrUnreachable = errors.New("client: daemon unreachable")

	// ErrClosed is returned by Subscription.Next after Close.
	ErrClosed = errors.New("client: subscription closed")
)

// The stable error codes of the local API. An *APIError carries one of them
// in Code (or "" when the daemon's answer carried none).
const (
	CodeBadRequest          = wire.CodeBadRequest          // 400
	CodeInvalidName         = wire.CodeInvalidName         // 400
	CodeBadJSON             = wire.CodeBadJSON             // 400
	CodeBadBase64           = wire.CodeBadBase64           // 400
	CodeValueTooLarge       = wire.CodeValueTooLarge       // 413
	CodeBodyTooLarge        = wire.CodeBodyTooLarge        // 413
	CodeNotFound            = wire.CodeNotFound            // 404
	CodeRouteNotFound       = wire.CodeRouteNotFound       // 404
	CodeConflict            = wire.CodeConflict            // 409
	CodeMethodNotAllowed    = wire.CodeMethodNotAllowed    // 405
	CodeUnsupportedEncoding = wire.CodeUnsupportedEncoding // 415
	CodeForbidden           = wire.CodeForbidden           // 403
	CodeStoreFull           = wire.CodeStoreFull           // 507
	CodeDiskFull            = wire.CodeDiskFull            // 507
	CodeTooMany             = wire.CodeTooMany             // 429
	CodeUnavailable         = wire.CodeUnavailable         // 503
	CodeCatchingUp          = wire.CodeCatchingUp          // 503, the node has not caught up with its cluster yet: retry later
	CodeNotPending          = wire.CodeNotPending          // 409, a cancel of an instant at which nothing of the key is pending
	CodeBusy                = wire.CodeBusy                // 503, a limit of the node is reached: retry later
	CodeFleetTooOld         = wire.CodeFleetTooOld         // 409, a write with an expiry, an effective time or a cancel while a member of the cluster runs an older build: upgrade it first
	CodeTimeout             = wire.CodeTimeout             // 408
	CodeInternal            = wire.CodeInternal            // 500
)

// APIError is an error answer of the daemon: its HTTP status and the
// stable code and human message of the JSON error body
// {"error":{"code":"...","message":"..."}}. Use errors.As to get at it.
type APIError struct {
	Status  int    // HTTP status code
	Code    string // stable code (see the Code* constants); "" if the body had none
	Message string // human text
}

// Error implements error.
func (e *APIError) Error() string {
	code := e.Code
	if code == "" {
		code = strings.ToLower(strings.ReplaceAll(http.StatusText(e.Status), " ", "_"))
	}
	if e.Message == "" {
		return fmt.Sprintf("cachecastd: %s (HTTP %d)", code, e.Status)
	}
	return fmt.Sprintf("cachecastd: %s: %s (HTTP %d)", code, e.Message, e.Status)
}

// Is reports whether the error is ErrNotFound: a 404 whose code is
// not_found (or absent). A 404 route_not_found is not ErrNotFound: it means
// the daemon does not know the route, not that the key is missing.
func (e *APIError) Is(target error) bool {
	if target != ErrNotFound {
		return false
	}
	return e.Status == http.StatusNotFound && (e.Code == CodeNotFound || e.Code == "")
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// ParseAPIError turns a non-2xx answer's status and body into an
// *APIError, for code that reads the daemon's answers itself, as
// `cachecast bench` does. The daemon sends {"error":{"code":..,"message":..}}; for
// robustness against proxies and older daemons it also accepts
// {"error":"text"} and a plain-text body.
func ParseAPIError(status int, body []byte) *APIError {
	e := &APIError{Status: status}
	var obj struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &obj) == nil && len(obj.Error) > 0 {
		var full struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		var text string
		switch {
		case json.Unmarshal(obj.Error, &full) == nil && (full.Code != "" || full.Message != ""):
			e.Code, e.Message = full.Code, full.Message
			return e
		case json.Unmarshal(obj.Error, &text) == nil:
			e.Message = text
			return e
		}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 512 {
		msg = msg[:512] + "..."
	}
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	e.Message = msg
	return e
}
