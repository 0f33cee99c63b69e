// Package client is the Go client of cachecastd's local API: HTTP/1.1 and
// JSON over the daemon's Unix socket.
//
//	c := client.New("/run/cachecast/cachecast.sock")
//	res, err := c.Publish(ctx, "prices", "sku-42", []byte("12.50"), "eu")
//	v, err := c.Get(ctx, "prices", "sku-42")          // v.Bytes, v.Tag, v.Origin, v.Seq, v.HLC, v.Time
//	sub, err := c.Subscribe(ctx, "prices", client.SubscribeOptions{From: client.FromEarliest})
//	for {
//		ev, err := sub.Next()                         // io.EOF when the daemon ends the stream
//		...
//	}
//
// # Consumer groups
//
// A subscription in clustering mode joins a consumer group: each message
// of the topic goes to one member of the group, which acknowledges it by
// its ID; what is not acknowledged in time, or refused, is delivered
// again (Event.Attempt counts), and in the end dead-lettered.
//
//	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Mode: client.ModeClustering, Group: "billing"})
//	ev, err := sub.Next()                                     // ev.ID, ev.Attempt, ev.Queue
//	res, err := c.Ack(ctx, "orders", "billing", []string{ev.ID}, nil) // refusals in the last list
//
// ResetGroup moves a group's position, Groups lists the groups, and
// DeadLetters, DeadLetter and Replay read and replay a group's dead
// letters.
//
// # Wire format
//
// The types mirror the wire objects field for field. Two identities do not
// fit a JSON number and travel as strings: origin as 16 lower-case hex
// digits, hlc (wall milliseconds << 16 | counter, above 2^53) as a decimal
// string; the client parses both into uint64. Times are RFC 3339 with
// milliseconds. Values travel raw in PUT and GET bodies, and in JSON (batch
// publish, subscription lines) as "value" when they are valid UTF-8 and
// "value_base64" otherwise; the client chooses on the way out and accepts
// both on the way in. Keys and tags are UTF-8 text: a batch holding one
// that is not is refused with ErrInvalidArgument before anything is sent
// (JSON would carry it as U+FFFD, another key), and an answer whose JSON
// strings are not valid UTF-8 is ErrBadResponse.
//
// Topic and key names are percent-encoded as one path segment each
// (url.PathEscape, plus "." and ".." so that no path cleaning takes a key
// for a dot segment); a key may hold any character the daemon allows,
// slashes included.
//
// # Errors
//
// An error answer of the daemon is an *APIError carrying the HTTP status
// and the stable code of the API ({"error":{"code":..,"message":..}}); get
// it with errors.As. A missing key or cursor matches ErrNotFound under
// errors.Is. A socket nobody listens on is ErrUnreachable; an answer that
// breaks the wire format is ErrBadResponse.
//
// A subscription stream the daemon ends with an error line reports it as
// an *APIError (Status 0). A subscription line that does not decode is
// never dropped silently: Subscription.Malformed counts them, Next
// returns each as an error wrapping ErrBadResponse (and can go on), and
// the Events channel ends at the first one with that error in Err.
//
// # Publish results
//
// A PutResult's Status is "ok" when the message was stored as the daemon's
// flush (and, in a cluster, replication) mode promises. Any other word,
// known or not, still means stored locally: callers treat it as a warning,
// never as a failure.
//
// # Connections and timeouts
//
// A Client is safe for concurrent use and pools connections. Every call
// but Subscribe is bounded by the caller's context or, when it has no
// deadline, by WithTimeout (DefaultTimeout). A subscription holds one
// connection for as long as it lives.
//
// Code that speaks HTTP to the daemon itself (`cachecast bench` drives
// one raw connection from its calling goroutine, cmd/cachecast/internal/rawconn:
// it spends a third of net/http's CPU per request, which matters when the
// client shares the machine with the daemon it measures) reads the
// answers with ParseResult, ParseResults, ParseValue and ParseAPIError,
// and checks a batch with CheckMessages, as Client does.
//
// Package clienttest serves the wire format from memory on a real socket,
// for testing code that uses this package without a daemon.
package client
