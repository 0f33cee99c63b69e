// Package store is a node's durable memory-mapped log, the indexes that
// find records in it, the consumer cursors, and the key/value view the
// log's records build, with the view's snapshot.
//
// The package is the orchestrator; its parts live beside it, each owning
// its bytes, in the way hashicorp/raft-wal keeps segment/ apart from wal:
//
//	store/record            the record format and the HLC (no other import)
//	store/view              the view and its snapshot file
//	store/internal/segment  segment files, their maps, the metafile, tail recovery
//	store/internal/index    the topic and origin indexes (mapped arrays)
//	store/internal/cursors  the durable named cursors' file
//	store/internal/fsys     fallocate, mmap, msync, fdatasync, the fault guard, atomic files
//
// The design follows SkyWalking Satellite's mmap queue (itself from
// bigqueue) for the files, and RocketMQ's CommitLog + ConsumeQueue for the
// log and its per-topic indexes. It knows nothing of the network: the
// cluster layer hands it records and reads records out of it.
//
// # Files
//
//	<dir>/LOCK                       flock: one process per directory (ErrLocked)
//	<dir>/meta                       the metafile, one page, two CRC'd copies (segment/meta.go)
//	<dir>/log/<20-digit position>    segment files, each a fixed number of segments
//	<dir>/log/<position>.free        recycled segment files waiting for reuse
//	<dir>/index/topic/<topic>/...    per-topic index chunks (index/index.go)
//	<dir>/index/origin/<16 hex>/...  per-origin index chunks
//	<dir>/cursors                    durable named cursors (cursors/cursors.go)
//	<dir>/snapshot                   the view's snapshot (view/snapshot.go)
//	<dir>/corrupt/                   damaged bytes copied aside by recovery and repair
//	<dir>/lost                       the records set aside as damaged, wanted back (see repair.go)
//
// # The log
//
// A log position is a byte offset into an endless log, cut into segments of
// SegmentSize bytes. A segment file holds a fixed number of consecutive
// segments (its slots; it is mapped whole while any of them is, so that the
// writer's move to the next slot maps nothing) and is named by the position
// of its first byte: one segment a file for segments of 8 MiB or more (the
// default 64 MiB), as many as fill 8 MiB for smaller ones (and at most an
// eighth of RetentionBytes), so that a small segment costs no file creation
// and no directory entry (segment.SlotsFor; the count is fixed when the
// directory is made and kept in the metafile). A file is recycled whole,
// once its last segment is: until then the recycled segments of a file
// still being written keep their disk space. Entries are 8-byte aligned and never span segments: an entry
// that does not fit in what is left of a segment goes to the start of the
// next one, and the writer leaves an end marker behind. Each entry is an
// 8-byte prefix of the log's own (the segment's mark and a kind, see
// segment/log.go) and a record: the fixed header drawn in package record
// (size, CRC-32C, kind, version, lengths, origin, seq, HLC) followed by
// topic, key, tag and value. The bytes of a record are the same in the
// log, in a snapshot-free catch-up and on the wire: a receiver checks the
// CRC and appends them unchanged (AppendRecord).
//
// The mark is the segment's number plus one. A recycled segment file is
// reused for later segments as it is, not zeroed: its blocks are written
// already, so the writer's first writes to its pages convert no extents,
// and whatever of its earlier use it still holds carries another mark,
// which recovery and readers take for "nothing here". (A directory made
// before the prefix existed keeps its unframed records; the metafile says
// from which position on entries are framed. The metafile's version is
// the directory's format: 3 for one segment a file, 4 for several (a build
// that reads only 3 would take a file for one segment). A build refuses a
// newer one, ErrNewerFormat, before it reads anything else, and builds
// that read only version 2 find no valid copy in a version 3 file and
// refuse it too, so that no build takes framed entries for damage. A
// version 3 directory is read as it is and stays one segment a file.)
//
// A background goroutine, the preparer, keeps the writer from system calls
// and page faults: it keeps a window (4 MiB, or the segment when smaller)
// ahead of the writer allocated (fallocate) and faulted in writable
// (MADV_POPULATE_WRITE; MADV_WILLNEED before Linux 5.14), and makes the
// next segments (1 MiB of them, at least one: a slot of the current file,
// or the first of a new sparse file or a reused one) with their first
// window ready, so that switching segments is a pointer swap (the switch
// asks for the next one at a random moment within 50 ms, not at the
// record every node of a fleet switches at, unless the ready ones would
// not last the writer twice that at its rate: segment/switch.go); with
// several segments a file it keeps the file after the next segment's
// made too, so that a writer that outruns it at a file's first slot
// makes a slot of an open file, never a file. Recycling takes segments
// out of the log's table: the preparer renames the files they empty
// free, oldest first, unmaps them and keeps or deletes the files
// (segment/ring.go; a crash before the rename finds the file retained
// if the metafile still counts it, else free). The
// preparer drops the pages the writer wrote from the process's resident
// set once they are a window behind the committed end (MADV_DONTNEED;
// the maps stay): they stay in the page cache, dirty until the flusher's
// msync of the file's range, from where
// a reader behind the tail faults them back in, to be dropped again after
// it (segment/release.go; not when the mapped segments hold at most 64
// MiB, which eviction bounds). At rest, once the housekeeping round finds
// the log's end where the round before found it, the preparer drops the
// rest as well (Log.Rest): the writer's segment, the window faulted in
// ahead of it, the next segment's first window; the writer's next commit
// has the window made ready again. A full disk is an
// ErrDiskFull from an allocation, never a SIGBUS on a page: the writer
// never writes past what is allocated, and allocates itself when it runs
// ahead of the preparer. A new store so costs two windows of disk, and
// of resident memory until it rests, not two segments. The indexes do the same for their
// chunk files, with a preparer goroutine for the topic indexes and one for
// the origin indexes: the next two chunks of an index (each doubles, from
// 512 entries up to IndexChunkEntries) are made, mapped and faulted in
// ahead of the writer, at a random moment within 50 ms after it asks
// rather than at the entry it asks at (the one every node of a fleet
// reaches at once), unless the entries ready would not last the writer
// twice that at its rate since its last ask: then at once, as a writer
// back to back would otherwise make them itself (index/array.go askNow);
// the preparer drops the full chunks behind the one before the writer's
// from the resident set, once each, and at rest the store drops every
// chunk, the writer's and those made ahead too (index/release.go);
// the files of chunks dropped by retention are kept and made the next
// chunks (zeroed and renamed), and the directory fsync of a chunk file is
// the index sync's, before it syncs entries in the chunk, never the
// writer's or the preparer's (index/array.go). Retention takes the
// dropped chunks out of an index's table only; their files are renamed
// free or deleted, and the directory synced, by the index's preparer
// once the flusher has synced the log's new oldest position into the
// metafile (Store.removeDropped), so that a crash never finds log records
// retained whose index chunks are gone; Open drops again the chunks a
// crash left that point below the log's oldest record. At most MaxMappedSegments segments
// are mapped; the least recently used unpinned one is unmapped when
// another is needed. Code that touches a map runs with
// runtime/debug.SetPanicOnFault, so an I/O error under a page is an ErrIO,
// not a crash.
//
// # Durability
//
// Every append is copied into the map, indexed, and made visible to
// readers before Publish returns. What "done" promises depends on Flush:
//
//   - FlushAsync: the record is in the page cache. A process crash
//     (SIGKILL, panic) loses nothing; a machine crash or power loss loses at
//     most the records appended since the last flush, which runs every
//     FlushInterval (default 100ms) or after FlushBytes (default 16 MiB).
//   - FlushSync: Publish returns once an msync covering the record (an
//     fdatasync for a segment no longer mapped) has returned (group
//     commit: one flush serves every writer waiting on it). Before a
//     flush the flusher waits, at most half the last flush's time (and
//     10ms), until as many writers wait as waited for the last one: the
//     writers that flush released come back with their next records,
//     and one flush carries all of them, not half (flusher.go's gather).
//     Nothing acknowledged is lost to a crash of the process, the machine
//     or the power, as far as the device honours the flush.
//
// A directory entry made for a new segment is synced by the next flush,
// before any record in it is reported durable.
//
// # Recovery
//
// A metafile found missing or empty beside segment files is made again
// around them (segment.FindLog, Meta.Adopt): their size and the oldest
// one's records must agree with Options.SegmentSize, recovery checks
// every record from the oldest file on, the indexes are fed again, and
// the node takes a new origin; else Open fails naming the metafile and
// changes nothing. A new metafile is never taken for a new log's, which
// would set the log aside.
//
// Open checks the records from the metafile's committed (flushed) position
// on: prefix, length, field lengths and CRC. The log ends at the first bad
// record, at the first entry without this use's prefix (zeros, or stale
// bytes of a reused file) unless the writer went on to the next segment
// there (the next segment's first entry is valid, of this use, and would
// not have fit in the room left: the end marker alone does not count, a
// damaged record's prefix may read as one), or at a missing segment file.
// Readers go past an end marker only where the writer went on, too.
// Damaged bytes are copied to corrupt/ first (fsynced, with the directory,
// before the original is zeroed); the rest of the last segment is
// discarded (it reads as zeros) and later segments are deleted, so a
// cut-off record can never reappear. The indexes are cut to the end of the
// log and rebuilt from it; the view is loaded from its snapshot and
// brought up to date from the log. A damaged snapshot (a flipped bit: its
// CRC or structure does not check) of a log that holds every record since
// the first is moved into corrupt/ and the view rebuilt from the log
// (SnapshotSetAside says where it went); with a recycled log it cannot be,
// and Open fails, unless Options.ViewFromPeers: then the view starts from
// what the log holds and waits for a peer's snapshot (ViewFromPeer), and
// no snapshot is written nor sent until Bootstrap has taken one. Reads check the CRC too, so a page damaged after
// recovery reads as ErrCorrupt, never as wrong bytes; only the replay in
// Open reads the records recovery has just checked without their CRCs
// (record.DecodeChecked: the CRC was a third of a recovery's CPU).
//
// Damage under the committed position (a bad sector, a stray write into
// flushed data) is not a torn tail: what follows it is good. It is found
// by a scrub that checks the whole retained log once after Open (in the
// background; Scrubbed says when it is done), by the replay, or by the
// reader that meets it, and the damaged record is set aside rather than
// the log cut: its bytes are copied to corrupt/ (synced, with the
// directory), it is listed in the lost file, and its slot is overwritten
// with a placeholder of the same size (record.KindLost) that every reader
// skips. Its records being replicated, the store then pulls it back: its
// origin's LastSeq and the Vector stop before it, so anti-entropy fetches
// it from a peer (this node's own origin too), and AppendRecord writes it
// back into its slot and applies it; the log, its indexes and offsets are
// as before the damage. LogLast and LogVector do not stop before it, and
// ReadOrigin answers ErrLost at it, so that the pushes of newer records
// and the followers of the log read on past it. Lost lists what is still missing, AcceptLost gives
// it up when no peer holds it (see repair.go). A damaged record the
// indexes do not know (in the part the replay re-indexes after a crash)
// cannot be named, and fails the open or the read as before.
//
// A crash may leave records that were written but not acknowledged; they
// are kept, with their seqs. A store that was not closed when the machine
// restarted (a power loss, a kernel crash) may have lost records appended
// after its last flush, and peers may hold them already; so it continues
// as a new origin, and no (origin, seq) ever names two messages. A process
// killed on a running machine loses nothing (the page cache has every
// write) and keeps its origin; the metafile records the kernel's boot ID
// to tell the two apart.
//
// # Retention
//
// RetentionBytes bounds the retained log (0: only the disk does);
// RetentionAge recycles segments last written longer ago than that. A
// segment is recycled only when the view's snapshot covers it and every
// durable cursor has passed it, so nothing unconsumed is dropped silently.
// When a write would pass RetentionBytes, WhenFull decides: FullRecycle
// recycles the oldest segments that may go, and fails with ErrFull if none
// may yet; FullRefuse fails the write with ErrFull. When only the view's
// snapshot holds the oldest segment (a writer that filled the bound
// before the next snapshot covered it), FullRecycle's refusal asks for a
// snapshot at once and the write waits for it, holding no lock, and is
// tried again: back-pressure, not an error, unless no snapshot covers
// more of the log within 5 s (a peer's together batch half arrived keeps
// it back) or one fails. A durable cursor holding the log back fails the
// write at once. Snapshots are written every SnapshotInterval and whenever
// the log has grown by a quarter of RetentionBytes (1 GiB without a bound).
// Recycled files are reused for new segments, as the seed design asks: the
// segment files are a ring, a recycled file renamed "<position>.free" by
// the preparer and kept open, then renamed to its next name, its
// blocks allocated and its pages possibly still cached; beyond two spare
// files they are deleted (by the preparer) to give the space back.
//
// # The view
//
// The view maps (topic, key) to the latest message by the greatest (HLC,
// origin); a tombstone is a message too, so a delete wins over an older
// value arriving late. The rule is deterministic, so two nodes holding the
// same records hold the same view, whatever the arrival order.
//
// # Clocks
//
// Every record carries an HLC stamp (record/hlc.go) and the view keeps the
// greatest (HLC, origin), so a node whose wall clock runs ahead would win
// every concurrent write and, through the HLC, drag every other node's
// clock along for good. With MaxClockOffset set (the daemon's
// --max-clock-offset, 500ms by default, as CockroachDB's max-offset),
// AppendRecord looks at a peer's record's stamp against the local wall
// clock before anything else:
//
//   - at most MaxClockOffset ahead: appended, applied and observed by
//     the HLC at once (the HLC moves at most that far ahead);
//   - further ahead, up to HardClockOffsetFactor (10) times the offset:
//     held (ErrHeld). A held record is not in the log, the view, the
//     vector or the HLC; its origin's later records are held behind it
//     (whatever their stamps), so the log keeps each origin gap-free and
//     in seq order and anti-entropy's vectors stay true. The flusher's
//     timer (every FlushInterval) appends the held records, in order,
//     once the local clock is within MaxClockOffset of their stamps;
//   - further ahead still, or when MaxHeldRecords (4096) records or
//     MaxHeldBytes (16 MiB) are held already: refused (ErrClockAhead).
//
// Neither a held nor a refused record is lost: held ones live only in
// memory (a restart forgets them), and as the vector does not cover
// either, the peers' anti-entropy offers them again every sync interval
// until the local clock has caught up and they are taken. A refusal
// counts each offer. Holding and refusing are counted (ClockStats) and
// logged with the origin, at most once per 10s per origin. An origin
// whose last 3 records in a row arrived beyond the offset, the last less
// than a minute ago, is flagged (OriginClocks): its clock is persistently
// ahead, or this node's is behind (the daemon tells the two apart by how
// many peers are flagged). A peer's snapshot (Bootstrap) moves the HLC
// at most MaxClockOffset ahead of the wall clock. Records replayed from
// this node's own log were admitted already and are not checked again,
// nor are this node's own records coming back from a peer (holding one
// would let Publish reuse its seq).
//
// # Concurrency
//
// Every exported method is safe for concurrent use. Writes are serialized
// by one lock that covers the copy into the map and the index entries, but
// not a sync-mode writer's wait for its flush; readers never take it.
//
// # Why it is this large
//
// About 4,300 lines, of which store.go is 1,550: the record format, the
// segments, the indexes, the cursors and the view are packages of their
// own (store/record, store/view, store/internal/...); what stays is the
// orchestration that needs all of them under one write lock (publish,
// recovery's replay, the follow hooks), plus three concerns that each
// touch that lock and the log together: repair of damaged records
// (repair.go), the clock guard (clockguard.go) and the cluster API
// (cluster.go). Each file is one concern and under 500 lines but store.go.
package store
