// Package httpapi is cachecastd's local API: HTTP/1.1 on the daemon's
// Unix socket, its routes, handlers, validation and error codes, behind a
// narrow interface to the node (Node: reads, the write path, cursors,
// status; Groups: the consumer groups). The daemon (package daemon) makes
// the socket and the node and serves New's handler on NewLane's listener:
// the fast lane answers the plain GET of a key that finds it without
// net/http, in the same bytes, and hands every other request to the
// http.Server with its connection (lane.go). The wire format is package
// wire's, shared with package client. This doc is the API's reference.
//
// # Answers and names
//
// All answers are JSON except GET of a key (the raw value) and subscribe
// (NDJSON). Identities: "origin" is 16 lower-case hex digits, "hlc" a
// decimal string (it exceeds 2^53), "seq" and offsets are JSON numbers,
// "time" is RFC 3339 with milliseconds (the HLC's wall-clock part).
//
// Names: a topic (and a cursor name) is 1 to 128 bytes of A-Z a-z 0-9 . _ -;
// a key is 1 to 1024 bytes of UTF-8 without control characters (in a path it
// is percent-encoded; a slash may be written as %2F or as is); a tag is 0 to
// 128 bytes like a topic. A value is at most --max-value-size (1 MiB), a
// request body at most --max-body-size. Everything is checked before
// anything is written: a rejected request changes nothing.
//
// A publish answers one PutResult per message:
//
//	{"topic":"prices","key":"sku-1","origin":"3f9a0c1d2b4e5f60","seq":7,
//	 "hlc":"117703570434031616","time":"2026-11-30T04:45:53.156Z","status":"ok"}
//
// "status" is "ok" when the message is stored as the flush mode promises
// (--flush async: in the page cache; sync: on disk). The cluster layer adds
// "replica_unavailable" and "replica_timeout"; a client treats any status
// it does not know as stored, with a warning.
//
// The routes, with curl (S=--unix-socket /run/cachecast/cachecast.sock).
// Each needs a role, named in brackets (see "Roles" below):
//
//	PUT /v1/topics/{topic}/keys/{key}   [publish]
//	    The body is the value; the optional header Cachecast-Tag sets the tag
//	    (given twice: 400 bad_request). Cachecast-Expires: <instant> makes
//	    the value expire then; Cachecast-Effective-At: <instant> schedules
//	    it (see "Time" below). 200 PutResult.
//	    curl -sS $S -X PUT -H 'Cachecast-Tag: eu' --data-binary 12.50 http://x/v1/topics/prices/keys/sku-1
//
//	GET /v1/topics/{topic}/keys/{key}   (and HEAD)   [read]
//	    200 with the raw value (application/octet-stream) and the headers
//	    Cachecast-Origin, Cachecast-Seq, Cachecast-Hlc, Cachecast-Time,
//	    Cachecast-Tag, and Cachecast-Expires when the value expires,
//	    Cachecast-Effective-At when it is a scheduled value in force; 404
//	    not_found when absent, deleted or expired; 503
//	    catching_up before the node has caught up with its cluster (see
//	    "Catching up" in package daemon).
//	    curl -sS $S http://x/v1/topics/prices/keys/sku-1
//
//	DELETE /v1/topics/{topic}/keys/{key}   [publish]
//	    Publishes a tombstone; with Cachecast-Effective-At, a scheduled
//	    one (the key goes at that instant). 200 PutResult.
//	    curl -sS $S -X DELETE http://x/v1/topics/prices/keys/sku-1
//
//	POST /v1/topics/{topic}/counters/{key}?by=N   [publish]
//	    Adds N (default 1; a float for a float) to the key as a counter,
//	    as Redis's INCRBY (command.Incr, the one rule): an increment bound
//	    to the version this node holds, or to the absence a key without
//	    a value counts after, from 0, which every node counts once. 200 PutResult, and the
//	    key's value after it on this node in Cachecast-Count; 409
//	    conflict when the value is no number or the sum overflows.
//	    curl -sS $S -X POST 'http://x/v1/topics/stats/counters/hits?by=3'
//
//	POST /v1/topics/{topic}/messages   [publish]
//	    One JSON object, or NDJSON (Content-Type: application/x-ndjson, one
//	    object a line) for a batch that is stored whole or not at all:
//	    {"key":"k","tag":"t","value":"text"} or "value_base64":"..." (not
//	    both; neither is an empty value), "delete":true for a tombstone. A
//	    message without a key is a stream message: stored and delivered to
//	    subscribers, not kept in the key/value view. Unknown fields are
//	    refused. JSON text is UTF-8: a string holding a byte that is not
//	    UTF-8, or a \u escape of half a surrogate pair, is 400 bad_json
//	    naming the line, the field and the byte (encoding it as U+FFFD
//	    would merge distinct keys); a value of any bytes goes as
//	    "value_base64". The time fields: "ttl_ms" (a number) or
//	    "expires_at", "effective_at", and "cancel":true (with
//	    "effective_at", no value: cancels the key's records scheduled for
//	    that instant); the headers Cachecast-Expires and
//	    Cachecast-Effective-At apply to every message that gives none (see
//	    "Time" below). An NDJSON batch of several messages becomes visible
//	    together on every node. 200 {"results":[PutResult,...]}.
//	    curl -sS $S -H 'Content-Type: application/x-ndjson' --data-binary @batch.ndjson http://x/v1/topics/prices/messages
//	    curl -sS $S -d '{"key":"sku-2","value":"9.99"}' http://x/v1/topics/prices/messages
//
//	GET /v1/topics/{topic}/pending?after=&limit=   [read]
//	    The records not in force yet: scheduled values and deletes, and
//	    cancels, by key then instant, limit keys (1 to 10000, default 1000):
//	    200 {"topic":"prices","pending":[{"key":"sku-1",
//	    "effective_at":"2026-12-01T00:00:00.000Z","tag":"","value":"7.99",
//	    "delete":false,"cancel":false,"origin":"..","seq":9,"hlc":"..."}],
//	    "next":"sku-1"} ("expires_at" too when set; "next" only when there
//	    are more: pass it as after=).
//	    curl -sS $S http://x/v1/topics/prices/pending
//
//	GET /v1/topics/{topic}/expiries?limit=100&scan=100000   [read]
//	    The keys whose value in force expires, soonest first, at most
//	    limit (1 to 1000): 200 {"topic":"prices","expiries":[{"key":"sku-1",
//	    "expires_at":"2026-12-01T00:00:00.000Z","tag":"","value":"7.99",
//	    "origin":"..","seq":9,"hlc":"..."}],"scanned":40,"truncated":false}.
//	    The view has no order by expiry: the route walks the topic's keys
//	    in byte order, at most scan of them (1 to 10000000), 4096 under
//	    one hold of the view's read lock; truncated is true when keys were
//	    left unwalked (a sooner expiry may be among them).
//	    curl -sS $S http://x/v1/topics/prices/expiries
//
//	DELETE /v1/topics/{topic}/pending/{key}?effective_at=<instant>   [publish]
//	    Cancels the key's records scheduled for that instant: at the
//	    instant nothing changes. 200 PutResult; 409 not_pending when
//	    nothing of the key is pending then (the instant has come, or
//	    nothing was scheduled for it).
//	    curl -sS $S -X DELETE 'http://x/v1/topics/prices/pending/sku-1?effective_at=2026-12-01T00:00:00Z'
//
//	GET /v1/topics/{topic}/keys?prefix=&after=&limit=   [read]
//	    Live keys in order, limit 1 to 10000 (default 1000).
//	    200 {"keys":["a","b"],"next":"b"}; "next" is empty on the last page,
//	    otherwise pass it as after= for the next one. 503 catching_up
//	    before the node has caught up.
//	    curl -sS $S 'http://x/v1/topics/prices/keys?prefix=sku-&limit=100'
//
//	GET /v1/topics?internal=   [read]
//	    200 {"topics":[{"name":"prices","keys":3,"messages":10}]}: the
//	    users' topics; internal=1 adds the daemon's own (see Internal
//	    topics below).
//	    curl -sS $S http://x/v1/topics
//
//	GET /v1/topics/{topic}/subscribe?from=&tags=&name=&ack=&events=&linger=   [read; consume with ack=auto]
//	    A stream of NDJSON, one line a message, as they arrive:
//	    {"offset":12,"topic":"prices","key":"sku-1","tag":"","value":"12.50",
//	     "delete":false,"origin":"..","seq":3,"hlc":"...","time":"..."}
//	    ("value_base64" instead of "value" when the bytes are not UTF-8).
//	    from: earliest, latest (the default), an offset in the topic, or an
//	    RFC 3339 time. An offset past the topic's end on this node is 400
//	    bad_request naming the end (the end itself waits for the next
//	    message); from=latest is the way to wait for new ones. tags: a||b, only messages with one of these tags.
//	    name: a durable cursor; without from=, the stream resumes at the
//	    cursor. ack=auto sets the cursor where the stream starts (making it
//	    the caller's, or 403 when another user owns it; 429 too_many past
//	    --max-cursors) and advances it as lines are written (at most once
//	    for a crash of the client between write and use); without it the
//	    client acknowledges with POST /v1/cursors/{name}. The headers go
//	    out once the stream's position is fixed: a subscriber from latest
//	    misses nothing published after it has them. A slow reader slows its
//	    own stream only (the handler waits in Write); nothing is dropped.
//	    The stream ends when the client leaves or the daemon stops; an error
//	    in between ends it with a last {"error":{...}} line. With
//	    "Accept: text/event-stream" the stream is server-sent events instead
//	    (what a browser's EventSource reads): "id: <offset>" and
//	    "data: <the same object>" per message, "event: error" for the error.
//	    A record with a time field says so on its line: "expires_at",
//	    "effective_at" (a scheduled record is delivered when it is
//	    published), "cancel":true; an expiry change (a Redis EXPIRE or
//	    PERSIST) has "expiry_of":{"origin":..,"seq":..}, the version whose
//	    expiry it changed, with that version's value and its new
//	    "expires_at" (none: removed); a counter increment has
//	    "increment_of":{"origin":..,"seq":..}, the version it counts on,
//	    its value the increment (not the sum), with "absent":true when it
//	    counts (from 0) on the key's absence after that version. Either
//	    object is {"absent":true} alone for a key never held, whose
//	    revival has no version. The revival of a deleted or expired key
//	    (the counter increments of its absence make) is served as the
//	    version it follows, as GET shows it: an expiry change of it names
//	    that version, without "absent", its value the revival's base "0".
//	    events=expired,effective (either or
//	    both) adds a line when a key of the topic expires on this node,
//	    {"event":"expired","topic":"prices","key":"sku-1","time":"..."},
//	    and when a scheduled record takes effect, {"event":"effective",
//	    "topic":..,"key":..,"tag":..,"value":..,"delete":false,
//	    "effective_at":..,"origin":..,"seq":..,"hlc":..,"time":..} (SSE:
//	    "event: expired" / "event: effective"); these lines have no
//	    offset and move no cursor.
//	    linger (a duration, at most 1s; 0 by default): once caught up,
//	    the stream waits that long before it looks again, so what arrives
//	    meanwhile goes out in one write: a tail that does not need each
//	    message at once (the operator console's, linger=100ms) costs the
//	    node a wake and a write per linger, not per message.
//	    curl -sSN $S 'http://x/v1/topics/prices/subscribe?from=earliest&name=web-1&ack=auto'
//
//	GET /v1/topics/{topic}/subscribe?mode=clustering&group=&tags=&max_inflight=   [consume]
//	    A member of consumer group {group} (package group has the
//	    semantics): the group's members, on every node, share the topic's
//	    messages, each handled by one of them. mode=broadcasting, the
//	    default, is the stream above (there group= is another word for
//	    name=). from=, name= and ack= are refused here: a group resumes at
//	    its committed position; move it with .../reset. max_inflight (1 to
//	    100000, default 1000) bounds what the member holds unacknowledged.
//	    The header Cachecast-Member gives the member's id. Each line is the
//	    object above plus "id":"<origin>-<seq>", "attempt" (1, then 2.. on
//	    redeliveries) and "queue"; SSE frames have "id: <that id>". Every
//	    member of a group, on every node, must name the same tags (in any
//	    order), and every node hosting it have the same --queues-per-topic:
//	    409 conflict otherwise. A group belongs to the uid whose member
//	    created it on this node (for the daemon's life; admins may act on
//	    any): another uid's join, and its dead-letter listings, are 403
//	    forbidden naming the owner.
//	    curl -sSN $S 'http://x/v1/topics/orders/subscribe?mode=clustering&group=billing'
//
//	POST /v1/topics/{topic}/groups/{group}/ack   body {"ack":[ids],"nack":[ids]}   [consume]
//	    Settles messages delivered on this node: ack handled them, nack
//	    refuses them (redelivered after --retry-backoff, at most
//	    --max-retries times, then dead-lettered). The group's position is
//	    written (as --replication says) before the answer.
//	    200 {"acked":1,"nacked":0,"unknown":0}; unknown counts ids not in
//	    flight here (acked already, or their queue moved to another node).
//	    404 not_found when the group has no member on this node. A
//	    message is settled only by the uid of the member it was delivered
//	    to, or an admin: 403 forbidden otherwise, and nothing of the
//	    request is settled.
//	    curl -sS $S -d '{"ack":["00000000deadbeef-42"]}' http://x/v1/topics/orders/groups/billing/ack
//
//	POST /v1/topics/{topic}/groups/{group}/reset   body {"to":"earliest"}   [admin]
//	    Moves every queue of the group, on every node: "earliest", "latest",
//	    an offset of the topic on this node, or an RFC 3339 time (the
//	    messages stamped from then on). 200 {"epoch":2}.
//
//	GET /v1/groups   [read]
//	    200 {"groups":[{"topic","group","queues":16,"nodes":[{"node":"<origin>",
//	    "queues":[0,..]}],"owned":[..],"members":[{"id","queues","inflight"}],
//	    "backlog","inflight","delivered","acked","retries","dead_letters",
//	    "dlq"}]}: every group the node knows, the allocation, and this
//	    node's part (owned: the queues it serves now; the counters
//	    delivered..dead_letters since its part started). dlq is the number
//	    of dead letters the group holds now, the same on every node. A
//	    group with no live member on any node is listed too, with "nodes"
//	    empty, while it has positions or dead letters.
//
//	GET /v1/topics/{topic}/groups/{group}/dlq?after=&limit=   [consume]
//	    200 {"dead_letters":[{"id","topic","group","key","tag","value",
//	    "delete","reason":"nack"|"timeout","attempts","origin","seq","hlc",
//	    "time","dead_at"}],"next":""}, in id order, paged like keys.
//	GET /v1/topics/{topic}/groups/{group}/dlq/{id}    one; 404 not_found.   [consume]
//	POST /v1/topics/{topic}/groups/{group}/dlq/replay   body {"ids":[..]} or {"all":true}   [admin]
//	    Hands dead letters back to the group (through its retry topic: not
//	    to broadcasting subscribers, and the key's value is not touched);
//	    they leave the dead-letter list. 200 {"replayed":1}.
//
//	POST /v1/cursors/{name}   body {"topic":"prices","offset":13}   [consume]
//	    Sets a durable cursor; offset is the next message to read. The
//	    caller owns a cursor it creates: another user moving it is 403
//	    forbidden (an admin may). A new cursor past --max-cursors, or past
//	    --max-cursors-per-uid of the caller's (admins are exempt from that
//	    one), is 429 too_many. A cursor holds retention back until it moves
//	    on: store_full names the one that does, with its owner.
//	    200 {"name":"web-1","topic":"prices","offset":13,"end":20,"lag":7,
//	    "owner_uid":1000}; end is the topic's next offset, lag end-offset,
//	    owner_uid null for a cursor made before owners were recorded (the
//	    next user to set it adopts it).
//	    curl -sS $S -d '{"topic":"prices","offset":13}' http://x/v1/cursors/web-1
//
//	GET /v1/cursors/{name}   [read]
//	    200 the same object; 404 not_found if unknown.
//	    curl -sS $S http://x/v1/cursors/web-1
//
//	GET /v1/cursors   [read]
//	    200 {"cursors":[<the same object>,...]}, by name (at most
//	    --max-cursors of them).
//
//	DELETE /v1/cursors/{name}   [consume; its owner or an admin]
//	    200 the cursor as it was; 404 not_found if unknown; 403 forbidden
//	    when another user owns it. Retention no longer waits for it.
//	    curl -sS $S -X DELETE http://x/v1/cursors/web-1
//
//	GET /v1/status   [read]
//	    200 {"node":{"name":"h","origin":"..","version":"v"},"uptime_seconds":1.5,
//	    "flush":"async","store":{"segments":1,"mapped_segments":1,"log_bytes":..,
//	    "write_pos":..,"flushed_pos":..,"oldest_pos":..,"records":..,"keys":..},
//	    "degraded":"alone: ...","view":{"vector":{"<origin>":seq},"topics":
//	    {"<topic>":"<sha256 hex>"}},"catch_up":{"phase":"pulling",
//	    "lag_records":N}}; degraded is there only while a node told
//	    to join (--join) is alone past --join-timeout, and says why;
//	    catch_up only until the node has caught up. away (absent while
//	    the node serves) says why a node out of contact with its fleet
//	    for more than half of --tombstone-grace left its cluster and
//	    stopped serving (restart it with --start-over). repair (absent while
//	    nothing was found damaged since the start): {"lost_records":N,
//	    "unavailable":N,"damaged_total":N,"repaired_total":N,"lost":[{
//	    "origin","seq","topic","segment","offset","copied_to","found",
//	    "available"}],"snapshot_set_aside":"<path>","view_from_peer":
//	    "waiting"|"done"}, the records of the log lost to damage and not
//	    back yet (at most 100 listed), available when a live peer holds
//	    one (it is being pulled back); where a damaged view snapshot was
//	    moved, and, when the log no longer covered it, whether the view
//	    still waits for a peer's snapshot (not ready meanwhile). view is
//	    the view's digest per topic (as store's Digest), the vector of
//	    exactly the records it holds and "at", when it was taken. A hash
//	    of the view costs O(keys) (about 50 ms of CPU at 300,000 keys); the node keeps
//	    the last one and answers it again, at the current vector, while
//	    the view holds it (no write, no expiry or scheduled instant
//	    since). After a change it hashes again only when its last hash
//	    ended 19 times that hash's length ago and no other runs (status
//	    causes at most a twentieth of a core of hashing, however often
//	    it is called); otherwise view is the last digest with the vector
//	    and "at" it was taken at: older than the call, never mixed.
//	    curl -sS $S http://x/v1/status
//
//	POST /v1/repair/accept   [admin]
//	    Gives up the records of the log lost to damage (no peer holds
//	    them): the node's vector goes on past them and it stops pulling
//	    them; a peer lacking them too is answered as for recycled records.
//	    200 {"accepted":[{"origin","seq","topic",...}]}.
//	    curl -sS $S -X POST http://x/v1/repair/accept
//
//	POST /v1/cluster/forget/{name}   [admin]
//	    Forgets a member removed from the fleet for good: it is dropped
//	    from the node's remembered peers and no longer called back, so it
//	    is no longer missing (degraded, verify's unreachable). With
//	    ?fleet=true every alive member is asked to forget it too (over
//	    gossip). 200 {"member":"c","nodes":[{"name","held","error"}]},
//	    a node per entry (held: it remembered the member; error: why it
//	    did not forget it). 409 conflict for this node itself, a member
//	    alive now, or a node in no cluster.
//	    curl -sS $S -X POST 'http://x/v1/cluster/forget/c?fleet=true'
//
//	GET /v1/backup   [admin]
//	    200 with the node's backup file (package backup: the view as a
//	    bootstrapping peer gets it, consumer groups' state included, the
//	    durable cursors, the node's name and origin, a SHA-256), streamed
//	    while writes go on; `cachecast backup FILE` saves and checks it.
//	    curl -sS $S -o node.backup http://x/v1/backup
//
//	GET /v1/verify   [read]
//	    200 {"identical":true,"common_vector":true,"nodes":[{"name","view":
//	    {"vector","topics"},"error"}],"differ":[{"node","topics":[..]}]}:
//	    this node asks every live member (gossip's TCP messages, under the
//	    cluster key) for its digest once it covers this node's vector, and
//	    asks again (5 rounds) while writes keep the vectors apart; per topic
//	    the digest most nodes hold is the reference, and differ names the
//	    nodes with another. identical needs every node's answer at one
//	    vector. `cachecast verify` prints it and exits 1 unless identical.
//	    Each node hashes its view only when it changed since its last
//	    digest. Verifies on a node take turns: one at a time, and after one
//	    that hashed the view for d, the next starts 4 d after it ended (a
//	    loop of them while writes go on keeps the node's hashing under a
//	    fifth of a core).
//	    curl -sS $S http://x/v1/verify
//
//	GET /v1/cluster   [read]
//	    200 {"node","origin","replica","members":[{"name","origin","state",
//	    "addr","data_addr","connected","self","lag":[{"origin","records",
//	    "seconds"}],"clock_ahead","clock_ahead_seconds","held_records",
//	    "refused_records","protocol","too_old","held_back"}],"clock_behind"}:
//	    the members as this node sees
//	    them and how far each is behind (a member that failed, left or is
//	    stopped: by what it lacks from the vector it last reported; the
//	    lag is as of the member's last ack or anti-entropy exchange with
//	    it, and leaves retired origins out); connected says its data port
//	    is reachable (connections open on demand and close when idle); a
//	    lone node lists itself only. clock_ahead flags a member whose records
//	    persistently arrive stamped more than --max-clock-offset ahead of
//	    this node's clock (clock_ahead_seconds: by how much its last one
//	    did); such records are held (held_records, until this clock
//	    catches up) or, past 10 times the offset, refused (refused_records
//	    counts the offers; anti-entropy offers them again). clock_behind
//	    says most peers are flagged: this node's clock is most likely the
//	    one behind (logged as an error too, every 5 minutes while it lasts).
//	    protocol is the highest data protocol the member speaks; too_old
//	    marks one below 4, which cannot read records with time fields
//	    (fleet_too_old while it is alive), and held_back the first of this
//	    node's records held back from it for that reason.
//	    curl -sS $S http://x/v1/cluster
//
//	GET /v1/fleet   [read]   (?timeout=2s)
//	    200 {"node","time","clock_behind","members":[{"name","origin",
//	    "state","addr","self","connected","protocol","too_old","lag",
//	    "clock_ahead","clock_ahead_seconds","held_records",
//	    "clock_offset_seconds","round_trip_seconds","summary":
//	    {"name","version","uptime_seconds","time","keys","records",
//	    "published","applied","degraded","away","clock_behind","catch_up",
//	    "healthy","observer":{"summary","agreed","differed",
//	    "agreement_ratio","freshness_p99_seconds"}},"error"}]}: the members of GET /v1/cluster, each with
//	    the figures it answered about itself (gossip's TCP messages, under
//	    the cluster key, as verify asks), asked of every live member at
//	    once, each given timeout (1ms to 10s; default 2s). A member that
//	    did not answer has no summary and an error saying why. published
//	    and applied count the records of the member's own origin and of
//	    the others it holds: rates are differences between two answers.
//	    clock_offset_seconds is the member's clock against this node's at
//	    the middle of the question's round trip.
//	    Cheap (no view digest), and one answer serves every caller of the
//	    next 500ms (this route's and the next's, by question): the
//	    operator consoles and `cachecast top` ask for it every second.
//	    curl -sS $S http://x/v1/fleet
//
//	GET /v1/fleet/groups   [read]   (?timeout=2s)
//	    200 {"node","nodes":[{"name","self","answered","error","groups":
//	    [{...as GET /v1/groups}]}]}: every member's consumer groups as its
//	    own GET /v1/groups lists them (the allocation, and its part:
//	    members, in-flight, backlog, counters), asked as GET /v1/fleet
//	    asks. A member that did not answer in time (or is not alive) has
//	    answered false and an error; one that answered but does not serve
//	    yet (catching up) or any more has an error and no groups.
//	    curl -sS $S http://x/v1/fleet/groups
//
//	GET /v1/topics/{topic}/nodes/{key}   [read]   (?timeout=2s)
//	    200 {"topic","key","same","nodes":[{"name","self","answered",
//	    "error","found","entry":{"value","binary","size","truncated",
//	    "sha256","tag","origin","seq","hlc","time","expires_at",
//	    "effective_at"},"pending":[{...,"delete","cancel"}],"differs"}]}:
//	    the key as every member holds it, side by side, asked as GET
//	    /v1/fleet asks. value is the text, or hex when binary, of at most
//	    4 KiB (truncated); members are compared on the whole value's
//	    sha256, the tag, the stamp, the times and the pending records.
//	    differs marks an answering member whose entry is not the one most
//	    answering members hold; same is true only when every member
//	    answered with the same entry: a member that did not answer (or is
//	    not alive) is never counted as the same. 503 catching_up as GET.
//	    curl -sS $S http://x/v1/topics/prices/nodes/sku-42
//
//	GET /v1/topics/{topic}/history/{key}   [read]   (?limit=20&scan=10000)
//	    200 {"topic","key","records":[{"offset","kind","value","binary",
//	    "size","truncated","sha256","tag","origin","seq","hlc","time",
//	    "expires_at","effective_at","target":{"hlc","origin","seq"}}],
//	    "scanned","truncated"}: the key's records in its topic's log on
//	    this node, newest first. kind is write, delete, cancel, expiry (a
//	    change of the expiry of the version target names) or counter (an
//	    increment of target's version); value as in .../nodes/{key}. The
//	    log has no index by key: the route reads the topic's messages from
//	    the last one back, at most scan of them (1 to 1000000) and 64 MiB,
//	    and stops at limit records of the key (1 to 1000). scanned counts
//	    the messages read; truncated is true when the scan stopped before
//	    the topic's oldest message retained (older records of the key may
//	    be there). Only what this node's log retains: not what it took
//	    from a peer's snapshot when it joined.
//	    curl -sS $S 'http://x/v1/topics/prices/history/sku-42?limit=5'
//
//	GET /healthz   [none]   200 {"status":"ok"} while the store is healthy, else 503
//	               (503 unavailable too once the node is away, as in status);
//	               507 disk_full while writes are refused for want of space
//	               (reads go on; ok again once a write passes or the file
//	               system has room for a segment). The systemd STATUS line
//	               says DISK FULL meanwhile; the watchdog pings go on.
//	GET /readyz    [none]   Likewise, and 503 before serving and once shutdown began;
//	               503 catching_up until the node has caught up with its
//	               peers; 200 {"status":"degraded","reason":..} while
//	               degraded (it serves).
//	    curl -sS $S http://x/readyz
//
// Every JSON body (messages, cursors, acks, resets, replays) is decoded
// strictly: unknown fields, data after the object, and strings that are not
// valid UTF-8 (see POST messages) are bad_json. A body is taken as it is:
// a Content-Encoding other than identity (gzip, br, ...) is 415
// unsupported_encoding, not stored compressed and not decoded.
//
// Errors are {"error":{"code":"...","message":"..."}} with a stable code:
// bad_request, invalid_name, bad_json, bad_base64 (400); value_too_large,
// body_too_large (413); not_found, route_not_found (404); conflict (409);
// method_not_allowed (405, with an Allow header); unsupported_encoding
// (415, a Content-Encoding other than identity); forbidden (403: a role
// is missing, or the cursor is another user's); too_many (429: a bound
// of --max-cursors, --max-cursors-per-uid or --max-members-per-uid, or the
// caller's uid holds its share of a limit below); store_full, disk_full
// (507); unavailable (503; also every read of the view and every write
// of a node away from its fleet too long, see "away" in GET
// /v1/status); catching_up (503, Retry-After: 1: a read of
// the view, or /readyz, before the node has caught up with its peers; the
// error object carries "catch_up":{"phase":...,"lag_records":N}, phase
// joining, asking, pulling or snapshot); busy (503, a limit of the node below is
// reached: retry, Retry-After: 1); timeout (408, a body that did not
// arrive within --read-timeout; the connection closes after it);
// not_pending (409, a cancel of an instant at which nothing of the key is
// pending); fleet_too_old (409, a write with an expiry, an effective time
// or a cancel while an alive member runs a build before them, data
// protocol below 4: the message names it, nothing is written; upgrade it
// first); internal (500). A request
// line or header that HTTP itself cannot parse is answered by net/http
// with a plain 400 before it reaches the API.
//
// # Time
//
// An instant is Unix milliseconds or an RFC 3339 time with its zone
// (2026-12-01T00:00:00Z); the answers write RFC 3339 with milliseconds.
// Each node decides by its own clock (DESIGN.md, "Time"; the fleet keeps
// the clocks within --max-clock-offset):
//
//   - An expiry ("ttl_ms", "expires_at", Cachecast-Expires) is carried by
//     the record: at that instant every node stops serving the value (GET
//     404, absent from the key list), with no delete sent; a node down
//     across it never serves it again. It must be ahead of the accepting
//     node's clock (400 bad_request otherwise); a delete or a cancel cannot
//     expire.
//   - A scheduled message ("effective_at", Cachecast-Effective-At, an
//     instant ahead) is stored and sent to every node at once and becomes
//     the value at that instant, with nothing sent then. The value in force
//     at t is the record with the greatest (effective time, HLC, origin)
//     among those effective at or before t; an ordinary write's effective
//     time is its stamp's. So a write for now published before the instant
//     is replaced at the instant, and a write after it wins again. A
//     scheduled delete deletes at its instant; a cancel (DELETE
//     .../pending/{key}, or "cancel":true) leaves in force what was.
//   - An NDJSON batch of several messages becomes visible together: a
//     node applies its records to the view at once when it has the last
//     one. A read of one key is of one instant; two reads of two keys one
//     after the other may fall on each side of a batch (the Redis door's
//     MGET reads its keys at one instant).
//   - While an alive member runs a build before time fields (a fleet
//     being upgraded), a write with any of them is refused with 409
//     fleet_too_old, and a batch is written as those builds write one,
//     its records applied one at a time (DESIGN.md, "Upgrades").
//
// # Limits and roles
//
// The server bounds the time to read headers (--read-header-timeout) and a
// whole request (--read-timeout), the time to write an answer
// (--write-timeout; subscription streams are exempt), and idle keep-alive
// connections (--idle-timeout). A body that stalls past --read-timeout is
// answered 408 timeout even when --write-timeout is no longer (the answer
// gets a few seconds of its own).
//
// No local user can starve the node of connections or memory. Each limit
// below has a node-wide bound (past it: 503 busy) and a share one uid may
// take (past it: 429 too_many), for every uid, admins included (callers
// of unknown credentials share one):
//
//   - Connections: --max-connections (1024) open connections besides
//     subscriptions, --max-connections-per-uid (512) of them one uid's. A
//     connection that waits for a request (idle keep-alive, or sending its
//     headers slowly) serves no one, so at a bound a new connection closes
//     the one that has waited longest (the uid's own first, at its share)
//     instead of waiting in the socket's backlog behind it. Waiting means
//     the daemon is blocked reading it: after a request, after part of
//     one, or 100ms into a first read; one just accepted with its request
//     on the way is not closed. A connection running a request is never
//     closed for another; when every one is, up to 16 spare connections
//     answer /healthz and /readyz, anything else busy (too_many at the
//     uid's share), and close.
//   - Subscriptions: --max-streams (1024), --max-streams-per-uid (512). A
//     subscription gives back its connection's place, so readers, however
//     many or slow, never take publishers' or health checks'.
//   - Memory: --max-body-memory (256MiB) bytes of request bodies held at
//     once over all connections, --max-body-memory-per-uid (128MiB) of them
//     one uid's. A body is counted from its Content-Length before a byte is
//     read (a chunked one as it grows) until its request is answered; past
//     a bound it is refused without being read, and the connection closes.
//     After a burst of bodies (64 MiB or more at once) the daemon hands
//     their memory back to the system.
//
// cachecast_api_connections_evicted_total counts the connections closed to
// make room. The Redis front door counts its own connections (socket and
// TCP together) against --max-connections and --max-connections-per-uid
// (a TCP client's share is its IP address's); past either a new one is
// answered "ERR max number of clients reached ..." and closed.
//
// Each connection's credentials are read from the kernel when it connects
// (SO_PEERCRED and SO_PEERGROUPS): uid, gid, pid and supplementary groups.
// They are logged with every write (at debug level) and every refusal (at
// warn). The socket's mode and group are the first fence; past it, every
// route needs a role (Role; the brackets above), checked by one function,
// access.Guard.Authorize, which any other front door calls the same way:
//
//	read      keys, topics, status, cluster, groups, cursor listings,
//	          subscriptions that move no cursor   --read-uids, --read-gids
//	consume   durable cursors (set, delete, ack=auto), group membership,
//	          acks and nacks, dead-letter listings --consume-uids, --consume-gids
//	publish   PUT, DELETE, POST messages          --allow-uids, --allow-gids
//	admin     every role; group resets, dead-letter replays, other users'
//	          cursors                             --admin-uids, --admin-gids
//
// A caller holds a role when its uid, its primary group or one of its
// supplementary groups is on the role's lists. consume, publish and admin
// include read; root and the daemon's own uid are always admin. An empty
// pair of lists is the pair of the role below: consume falls back to
// publish, publish to read, read to anyone who can open the socket. So
// with no flags every caller but admin's work is open (one user's `make
// run`), --allow-uids alone restricts consuming too, and --read-uids alone
// restricts everything. A refusal is 403 forbidden naming the role, the
// caller's uid and the flags that grant it; nothing is changed.
//
// What one user creates is bounded: --max-cursors (1000) durable cursors on
// the node, --max-cursors-per-uid (100) of one user's, --max-members-per-uid
// (256) consumer-group members one user holds at once (admins are exempt
// from the per-uid bounds).
//
// # Internal topics
//
// Topics whose names start with '$' are the daemon's own (a user's topic
// name cannot hold '$'): $groups holds which node hosts members of which
// consumer group (written once a node's members have stayed a second, at
// most once a second per group: short-lived subscriptions write nothing), $offsets each group queue's committed position,
// $owners the uid that owns each group on each node (written when it
// claims the group),
// $dlq/<topic>/<group> a group's dead letters and $retry/<topic>/<group>
// the dead letters replayed to it. They travel like any topic, but no
// topic route reads or writes them (their names are refused there):
// their content is reached through the group routes (GET /v1/groups,
// .../dlq, .../dlq/replay, .../reset). GET /v1/topics lists them only
// with internal=1.
//
// # Why it is this large
//
// About 4,000 lines, of which 570 are this reference: one file a family
// of routes (messages, groups, time), the server's plumbing (server.go:
// request parsing, streaming, errors), the fast lane (lane.go, about 490:
// it answers from the same entry and roles as getKey), all behind the
// Node and Groups interfaces. It stays one package: every family is a handful of
// handlers over the same request parsing, roles, limits and error
// mapping, so no seam runs between them that a second package would
// show (the operations' meaning is package command's, the wire format
// package wire's, the callers and limits package daemon/internal/access).
package httpapi
