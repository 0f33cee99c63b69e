// Package command is the one meaning of each operation on a node, below
// its doors: the local API's HTTP routes (daemon/httpapi), the Redis door
// (package resp), and the CLI, which goes through HTTP. A door parses its
// protocol into an operation, asks this package what the operation means
// (the message it writes, or why it is refused) and translates the answer
// back: each maps the typed errors to its own words, an HTTP status and
// error object, or a Redis error prefix.
//
// What lives here, once:
//
//   - a message's checks (Limits.Message, Limits.Batch): topic, key and
//     tag names, --max-value-size and --max-body-size, and how the time
//     fields go together (TimeFields);
//   - the time rules against the node's clock (Times, Effective): an
//     expiry and an effective time ahead, a cancel of an instant ahead;
//   - the operations that decide what a write is from what the node
//     holds: an expiry change bound to the version it changes
//     (ChangeExpiry: Expire's condition, PastExpiry, ExpiryChange), a cancel of a pending instant
//     (Cancel; CancelKey reads what is pending of the node, a Reader), a
//     counter increment (Count; Incr reads the key of the node and gives
//     the entry a transaction sees after it);
//   - the node's refusals of its view (State: away, catching up), and
//     the store's errors as typed errors (StoreError).
//
// The one write path (the publish role, the fleet's protocol, the store,
// the replica's status) is the daemon's Daemon.publish, which every door
// reaches through the daemon's node adapter; the store offers one Follow
// for every reader of its changes.
//
// Errors are *wire.Error: a stable code (wire.Code*) and a message. A
// refusal that has a cause in a lower floor (a counter's value that is no
// number: view.ErrNotInteger) also wraps that cause, so a door that words
// the causes apart (Redis does) finds it with errors.Is.
//
// Nothing here keeps state or blocks: every function may be called from
// any goroutine.
package command
