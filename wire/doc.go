// Package wire is the local API's wire format, shared by the daemon (its
// HTTP API, daemon/httpapi, and its Redis front door's adapter) and by
// package client: the error codes and the HTTP status of each, the
// publish statuses, the name limits, the answer objects (PutResult,
// ClusterStatus, ...), and the one JSON string escaper with the
// hand-written appenders of the hot paths (a publish's results, a
// subscription's lines, a batch's messages) and the scanners that read
// them back.
//
// The appenders and scanners exist because encoding/json costs about a
// microsecond per object, as much as the daemon spends storing a message;
// each has a benchmark beside encoding/json in this package, and a fuzz
// target that checks it against encoding/json. Everything else is plain
// encoding/json.
//
// The reference of the routes and their objects is daemon/httpapi's
// package doc.
package wire
