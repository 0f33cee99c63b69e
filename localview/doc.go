// Package localview is the daemon's key/value view in a shared-memory
// file: any local process maps it read-only and reads a value with a few
// memory loads, no system call, no lock shared with the writer and no
// registration (nothing a killed reader could leave behind).
//
// The daemon (cachecastd --view-file) is the one Writer: it mirrors every
// change of its store's view (from any node, deletes included) into the
// file within microseconds, each publish of the store (an atomic batch:
// an HTTP NDJSON batch, a Redis MSET) as one batch of the file. A Reader
// (Open, Get, GetInto, GetMany, Scan, Fresh) follows the file through growth, compaction and daemon restarts by
// itself. The python/ directory holds a reader in Python with only the
// standard library, written from this page.
//
// # Model
//
// One writer, any number of lock-free readers, as Aeron's log buffers and
// the Linux seqlock: each record carries a version word, odd while the
// writer changes the record and two more once it is done. A reader loads
// the version, copies, loads it again: an odd or changed version means the
// copy may be torn and is thrown away and retried; it is never returned.
// The writer never waits for readers.
//
// Batches: the writer numbers its record writes 1, 2, 3, ... and a
// record's version is twice the number of the write that last changed it.
// The header's committed word is the number of the last write of a whole
// batch: the writer stores it once a batch is all written (a change
// outside a batch is a batch of its own). A reader of several keys
// (GetMany) loads the committed word, reads each key, and keeps the
// result only if no version it saw is of a later write: each key it read
// then held, when the read began, what it read, and no batch was half
// there. Otherwise it waits for the batch to be committed and reads
// again. (Format version 2 started every record's version at 0 and had
// no committed word.)
//
// A file is one generation: a fixed-size slot table and a fixed-size
// arena. When either fills up (growth), or the arena is mostly garbage
// (compaction), the writer builds the next generation beside the file
// (<path>.<generation>.tmp), renames it onto the path (atomic), and only
// then sets the "superseded" bit of the old header. A reader that sees the
// bit opens the path again and maps the new file; the old file, unlinked
// by the rename, stays valid for as long as anyone maps it. A restarting
// daemon first clears the old file's "ready" bit, then puts an empty, not
// ready generation in place and supersedes the old one; it sets "ready"
// once the store has recovered and the view is loaded.
//
// # File
//
// All integers are little endian. Every record and every 8-byte field is
// 8-byte aligned. The file is
//
//	+---------------------+ 0
//	| header (4096 bytes) |
//	+---------------------+ 4096 (slots offset)
//	| slot table          | slot count x 8 bytes, a power of two
//	+---------------------+ arena offset
//	| arena               | records, one after another
//	+---------------------+ arena offset + arena size (<= file size)
//
// # Header
//
//	offset size field
//	0      8    magic "CCVIEW\x00\x01"
//	8      4    format version (3)
//	12     4    header size (4096)
//	16     8    file size in bytes (<= the file's real size)
//	24     8    generation: 1, 2, 3, ... one more for each new file
//	32     8    slots offset (4096)
//	40     8    slot count (a power of two)
//	48     8    arena offset
//	56     8    arena size
//	64     8    state: bit 0 ready, bit 1 superseded, bit 2 closed
//	72     56   zero (the state word has its cache line to itself)
//	128    8    heartbeat: unix nanoseconds up to which the view is known
//	            current (every change made before it is in the file);
//	            written after each batch of changes and every 50ms
//	136    8    writer's process ID
//	144    8    created: unix nanoseconds
//	152    8    committed: the number of the writer's last record write
//	            that ends a batch (see Model): every write numbered up
//	            to it is of a batch that is whole in the file
//	160    32   zero
//	192    8    meta version: the seqlock of the fields from 200 to 4095
//	200    8    live keys
//	208    8    changes applied since the writer started
//	216    8    unix nanoseconds of the last change (taken when the
//	            counters are published: to within a heartbeat)
//	224    4    alive cluster members (this node included; 0: no cluster,
//	            or, with known members and not ready, the node left its
//	            cluster: away, out of contact with its fleet too long)
//	228    4    known cluster members
//	232    4    origin count n (at most 241)
//	236    4    zero
//	240    16*n (origin ID u64, greatest HLC applied from it u64), sorted
//	            by origin; with more origins than fit, the most recent
//
// Offsets 0 to 63 and 128 to 191 never change within a generation, but
// the state (64), the heartbeat (128) and the committed word (152) do; the fields from 200 on change
// under the meta version, as a record's fields do under its version.
//
// # Slot table
//
// A slot is one 64-bit word, written with a single atomic store:
//
//	bits 63..32  hash of (topic, key), never 0
//	bits 31..0   record offset / 8 (an absolute file offset)
//
// 0 is an empty slot. The table is open addressing with linear probing:
// the key's first slot is hash & (slot count - 1), then the next, wrapping
// at the end, until its slot or an empty one. A slot, once set, only ever
// changes to point at a new record of the same key (a value that outgrew
// its record); deleted keys keep their slot (their record says deleted)
// until the next generation drops them. The writer keeps the table at most
// 3/4 full.
//
// The hash is CRC-32 (IEEE, as zlib.crc32 and Go's crc32.ChecksumIEEE)
// over the topic's length as 2 bytes, the topic's bytes and the key's
// bytes, then the murmur3 32-bit finalizer (h ^= h>>16; h *= 0x85ebca6b;
// h ^= h>>13; h *= 0xc2b2ae35; h ^= h>>16, all mod 2^32); a result of 0
// becomes 1. See Hash.
//
// # Record
//
//	offset     size  field
//	0          8     version: 2n once write n of the writer changed it
//	                 (so it only grows), 2n-1 while write n is at it
//	8          8     HLC of the message that set the value
//	16         8     origin of that message
//	24         8     its seq
//	32         4     value length v
//	36         2     tag length t
//	38         2     flags: bit 0 deleted
//	40         4     capacity c: room for tag and value, a multiple of 8
//	44         2     topic length p
//	46         2     key length k
//	48         p+k   topic, key, zero padding to a multiple of 8
//	d          c     tag (t bytes), value (v bytes), zero padding; t+v <= c
//	                 (d = 48 + (p+k rounded up to 8))
//
// Offsets 40 to 47 and the topic and key never change: a record belongs
// to one key for its life. The rest changes under the version. A value
// that fits the capacity is rewritten in place; a larger one goes to a new
// record, and the slot is switched to it. (Format version 1 had the tag
// and value before the topic and key; version 2 puts the key first, so
// that a reader knows the address of every cache line of the record it
// wants from the slot alone, and the CPU fetches them together.)
//
// # Reading a value
//
// Open: open the path read-only, fstat it, map the whole file read-only
// (PROT_READ, MAP_SHARED; the Go reader also asks for huge pages,
// madvise MADV_HUGEPAGE, which a tmpfs mounted huge=within_size or always
// gives without it). Check the magic, the version (3), the header
// size (4096), that the file size field is at most the mapping's length,
// the slots offset is 4096, the slot count is a power of two, the arena
// starts at or after the table's end, 8-aligned, and ends inside the
// mapping. Keep these numbers; they do not change within a generation,
// and keep the file's device and inode numbers.
//
// Get(topic, key):
//
//  1. Load the state word (offset 64). Superseded: open the path again
//     (Open), unmap the old file, and start over (a few times at most).
//     Closed or not ready: answer "not ready" (fall back to the socket);
//     not ready with 0 alive of known members (offset 224): "not ready,
//     the node left its cluster" (away: the socket refuses too).
//  2. h = hash(topic, key); i = h & (slot count - 1).
//  3. Load slot i (one 64-bit load). 0: the key is not there, stop. If its
//     upper 32 bits are not h, i = (i+1) & (slot count - 1) and repeat
//     (at most slot count times).
//  4. off = (lower 32 bits) * 8. Check arena offset <= off and off + 48 +
//     p + k <= arena end, with the p and k of the wanted topic and key.
//  5. Compare the bytes at off+48 with the wanted topic and key, and the
//     lengths at offset 44 with theirs; if either differs, go on probing
//     at 3. Read the capacity c (offset 40); check that it is a multiple
//     of 8 and d + c <= arena end. Anything else is a damaged file: stop
//     with an error.
//  6. Load the version (offset 0). Odd: the writer is in the record; load
//     it again (yield after a while, and give up after ~20000 tries: a
//     writer that died in the middle leaves it odd).
//  7. Copy offsets 8 to 39 and then t+v bytes from d.
//  8. Load the version again. If it differs from the one of step 6, go back
//     to 6. If t+v > c (after the version check passed), the file is
//     damaged. If the deleted flag is set, the key is not there.
//  9. Return the value, the tag and (HLC, origin, seq).
//
// # Reading several keys at one instant
//
// GetMany(keys) sees a batch whole or not at all:
//
//  1. Step 1 of Get.
//  2. c = the committed word (offset 152), an acquire load: every load
//     below comes after it.
//  3. For each key, steps 2 to 8 of Get; keep the version read (of a
//     deleted record too). newest = the greatest of those versions.
//  4. If newest/2 <= c, return what was read: no record read was changed
//     by a write after c, so each held at step 2 what was read, and every
//     batch up to c is whole (a key not found was not there at step 2
//     either: a slot, once set, stays).
//  5. Otherwise a batch was being written (or others came after it):
//     wait until the committed word is at least newest/2 (or the file is
//     superseded), and start again at 1. Give up after about a second
//     (a writer that died in the middle of a batch never commits it; one
//     that rewrites the same keys without a pause starves the reader).
//
// The reader may touch every key's slot, and then every record, before
// it reads any, so that their cache misses overlap.
//
// On CPUs that reorder loads (arm64), the loads of step 7 must not move
// past the second version load: the Go reader copies with atomic 64-bit
// loads there (acquire loads), a C reader would put an acquire fence
// (smp_rmb) before the second load. On x86 loads are not reordered with
// other loads, and a plain copy (memcpy) between the two loads is enough.
//
// A file that nobody marked superseded can still stop being the path's:
// its runtime directory deleted, its daemon killed and a new one started
// on a new file. Every 64 reads the Go reader compares the heartbeat
// (offset 128) with the clock; once it is more than a second old it stats
// the path (at most every 100ms): another file there is opened, no file
// makes the read "not ready". A read of a file that is closed or not
// ready looks at the path the same way (at most every 100ms) before it
// answers "not ready". A current view costs no system call (the
// clock is read through the vDSO, where the clock source allows it: the
// TSC, kvm-clock).
//
// Scan(topic): walk every slot; for each non-empty one, check the record
// (off + 48 <= arena end, capacity a multiple of 8, d + c <= arena end),
// keep those whose topic matches, and read each as in steps 6 to 8. Freshness: the heartbeat (offset 128) says when the writer last
// said the view was current; a reader that needs fresh prices compares it
// with its own clock (Fresh). The meta fields (200 on) are read as a
// record is: meta version, fields, meta version again.
//
// A reader never writes to the file and trusts nothing in it: every offset
// and length is checked against the mapping before it is used, and a
// mapped page that faults (the file truncated under the mapping) is turned
// into an error (runtime/debug.SetPanicOnFault). A damaged file reads as
// ErrCorrupt, never as a crash or as bytes from outside the record.
//
// # Writing
//
// To change a record in place as write n: store 2n-1 (odd) in the
// version, store the fields and the data, store 2n. The version stores are atomic (on x86 a
// locked instruction, a full fence), and so is every store between them
// on CPUs that reorder stores (arm64: release stores); on x86 the stores
// between them are plain ones, which x86 makes visible in program order. A new record is written in full in the
// free part of the arena and then published by one atomic store of its
// slot. Once a batch's last write (n) is done, store n in the committed
// word; a new generation starts with the current one's committed word
// and each record's version (a batch may span the rebuild). Nothing is
// ever freed within a generation: the garbage goes with
// the generation, so a reader holding an old offset reads a record that
// is still there.
//
// Sizes: a record is 48 bytes plus topic and key rounded up to 8 plus
// tag and value rounded up to 8; a key costs 8 / load bytes of slot table
// (10.7 to 21.3 bytes at a load between 3/8 and 3/4). A new generation
// has room for 1/8 more keys and bytes than the live ones (twice as many
// while small), so the file stays within about 1.125 times its live
// records. A file over 2 MiB is a whole number of 2 MiB huge pages, so
// that a tmpfs mounted huge=within_size backs every byte of it with huge
// pages and a reader's mapping is PMD-mapped to its end: a random read of
// a large view is two dependent cache misses, each of them a TLB miss
// and a page walk on 4 KiB pages (BENCHMARKS.md, which measures what one
// miss costs: BenchmarkMemoryFloor). The file is allocated
// (fallocate) when made: a full tmpfs is an error then, not a SIGBUS
// later. The format limits a file to 32 GiB.
package localview
