"""Read cachecast's shared view (cachecastd --view-file) from Python.

Standard library only (mmap, struct, zlib). The format and the reader's
algorithm are drawn in the Go package's doc (localview/doc.go); this module
follows it step by step. A View maps the file read-only and reads a value
with a few slices of the mapping: no system call, no lock, no registration.

    import cachecast_view
    view = cachecast_view.View("/run/cachecast/cachecast.view")
    view.fresh(0.5)                  # raises Stale or NotReady (Away)
    e = view.get("prices", "sku-1")  # None when the key is not there
    if e is not None:
        print(e.value, e.tag, e.hlc, e.origin, e.seq)
    # Several keys at one instant: a batch (HTTP NDJSON, Redis MSET) is
    # seen whole or not at all. None for a key not there.
    a, b = view.get_many("prices", ["sku-1", "sku-2"])

A View is not safe for concurrent use by several threads: give each its own.
Unlike the Go reader, it cannot survive the file being truncated under its
mapping (the pages past the new end raise SIGBUS, which Python cannot turn
into an exception): the daemon never does that (it allocates each file whole
and replaces it by a rename), only someone who may write the file can.

x86 only: the reader checks a record's version before and after copying it,
which is enough where the CPU does not reorder loads with loads (x86's total
store order). On arm64 and other weakly ordered CPUs that check needs a load
fence that Python's standard library cannot issue, so a torn value could be
returned: the module refuses to import there (ImportError); read through the
socket, or through the Go reader (package localview), instead.
Run as a script it prints what it reads as JSON lines (the Go tests compare
them with the Go reader):

    python3 cachecast_view.py PATH get TOPIC KEY
    python3 cachecast_view.py PATH keys TOPIC
    python3 cachecast_view.py PATH dump
    python3 cachecast_view.py PATH gets < lines of "xTOPICHEX xKEYHEX"
    python3 cachecast_view.py PATH many < the same lines (one get_many)
"""

import collections
import json
import mmap
import os
import stat
import struct
import sys
import time
import platform
import zlib

# The seqlock reads below are correct only where loads are not reordered
# with loads: refuse elsewhere rather than risk returning a torn value.
_MACHINE = platform.machine().lower()
if _MACHINE not in ("x86_64", "amd64", "i386", "i486", "i586", "i686", "x86"):
    raise ImportError(
        "cachecast_view reads the shared view only on x86 (this is %r): on weakly "
        "ordered CPUs its version checks need a load fence Python cannot issue; "
        "read through the socket or the Go reader instead" % platform.machine())

MAGIC = b"CCVIEW\x00\x01"
VERSION = 3
HEADER_SIZE = 4096
RECORD_HEADER = 48
MAX_ORIGINS = (HEADER_SIZE - 240) // 16

STATE_READY, STATE_SUPERSEDED, STATE_CLOSED = 1, 2, 4
FLAG_DELETED = 1

# How often a read retries an entry the writer is in before giving up, and
# how many generations one call follows (as the Go reader).
SPIN_LIMIT = 20000
MAX_REOPENS = 8
# The check of the path for a file that stopped being the path's without
# being superseded (as the Go reader: see localview/doc.go).
ORPHAN_CHECK_EVERY = 64
ORPHAN_AFTER = 1.0
ORPHAN_STAT_EVERY = 0.1
# How long get_many waits for keys that keep changing, or for a batch to be
# committed, before it raises Busy (as the Go reader).
BATCH_WAIT = 1.0

_U64 = struct.Struct("<Q")
_U16 = struct.Struct("<H")
# Offsets 8..47 of a record: hlc, origin, seq, value len, tag len, flags,
# capacity, topic len, key len.
_FIELDS = struct.Struct("<QQQIHHIHH")
# Offsets 40..47: capacity, topic len, key len (they never change).
_FIXED = struct.Struct("<IHH")
_GEOMETRY = struct.Struct("<8sIIQQQQQQ")  # offsets 0..63
_u64, _fields, _fixed = _U64.unpack_from, _FIELDS.unpack_from, _FIXED.unpack_from


class Error(Exception):
    """Base of the errors of this module."""


class NotReady(Error):
    """The daemon has not loaded the view yet, has stopped, or lost it."""


class Away(NotReady):
    """The daemon's node left its cluster, out of contact with its fleet
    too long: not ready, and the header counts no alive member of those
    known (restart it with --start-over)."""


class Stale(Error):
    """The daemon's heartbeat is older than asked: gone, stuck or behind."""


class Corrupt(Error):
    """The file breaks the format (an offset outside the mapping, ...)."""


class Busy(Error):
    """An entry stayed half-written too long (its writer died mid-update)."""


Entry = collections.namedtuple("Entry", "value tag hlc origin seq")


def hash_key(topic, key):
    """The table's hash of (topic, key): CRC-32 over the topic's length (2
    bytes, little endian), the topic and the key, then murmur3's fmix32."""
    h = zlib.crc32(key, zlib.crc32(topic, zlib.crc32(_U16.pack(len(topic)))))
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h or 1


def _align8(n):
    return (n + 7) & ~7


def _bytes(s):
    return s.encode() if isinstance(s, str) else bytes(s)


class View:
    """A read-only mapping of a view file that follows its generations."""

    def __init__(self, path):
        self.path = path
        self._m = None
        self._topic_crc = {}
        self._reads = 0
        self._next_stat = 0.0
        self._attach()

    def _attach(self):
        # O_NONBLOCK: a FIFO at the path must not hang us (refused below).
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size < HEADER_SIZE or st.st_size > 8 << 32:
                raise Corrupt("%s is not a view file (%d bytes)" % (self.path, st.st_size))
            m = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        try:
            geometry = self._check(m)
        except Corrupt:
            m.close()
            raise
        if self._m is not None:
            self._m.close()
        self._m = m
        self._ino = (st.st_dev, st.st_ino)
        self.generation, self._mask, self._arena, self._end = geometry

    @staticmethod
    def _check(m):
        (magic, version, header, file_size, gen, slots_off, slots,
         arena_off, arena_size) = _GEOMETRY.unpack_from(m, 0)
        if magic != MAGIC:
            raise Corrupt("bad magic")
        if version != VERSION:
            raise Corrupt("format version %d, this reader knows %d" % (version, VERSION))
        if header != HEADER_SIZE or slots_off != HEADER_SIZE:
            raise Corrupt("header size")
        if file_size > len(m):
            raise Corrupt("header says %d bytes, the file has %d" % (file_size, len(m)))
        if slots == 0 or slots & (slots - 1) or slots > len(m) // 8:
            raise Corrupt("slot count %d" % slots)
        if arena_off < HEADER_SIZE + 8 * slots or arena_off % 8 or arena_off > file_size:
            raise Corrupt("arena offset %d" % arena_off)
        if arena_size > file_size - arena_off:
            raise Corrupt("arena size %d" % arena_size)
        return gen, slots - 1, arena_off, arena_off + arena_size

    def _current(self):
        """Step 1: follow a superseded generation; refuse a view not ready."""
        if self._m is None:
            raise Error("closed")
        for _ in range(MAX_REOPENS):
            state = _U64.unpack_from(self._m, 64)[0]
            if state & STATE_SUPERSEDED:
                try:
                    self._attach()
                except OSError as e:
                    raise NotReady("generation %d superseded, the next: %s" % (self.generation, e))
                continue
            if state & (STATE_CLOSED | STATE_READY) != STATE_READY:
                # A closed or not ready file nobody will supersede (its
                # daemon started over on a new file after it was
                # unlinked): look at the path now and then.
                try:
                    if self._moved():
                        self._attach()
                        continue
                except (OSError, Corrupt):
                    pass  # no file there, or not a view: not ready either way
                if state & STATE_CLOSED:
                    raise NotReady("the daemon closed it")
                alive, members = struct.unpack_from("<II", self._m, 224)
                if alive == 0 and members > 0:
                    raise Away("view not ready: the node left its cluster (out of contact with its fleet too long; restart it with --start-over)")
                raise NotReady("view not ready")
            return
        raise NotReady("more than %d generations in one read" % MAX_REOPENS)

    def _moved(self):
        """Stat the path, at most every ORPHAN_STAT_EVERY: True when it
        names another file than the mapped one; OSError when none."""
        now = time.time()
        if now < self._next_stat:
            return False
        self._next_stat = now + ORPHAN_STAT_EVERY
        st = os.stat(self.path)
        return (st.st_dev, st.st_ino) != self._ino

    def _check_orphan(self):
        """Every ORPHAN_CHECK_EVERY gets: a file whose heartbeat is older
        than ORPHAN_AFTER may no longer be the path's (its directory
        deleted, a new daemon on a new file): look at the path and map
        the file there (none: NotReady)."""
        if time.time() - _u64(self._m, 128)[0] / 1e9 < ORPHAN_AFTER:
            return
        try:
            moved = self._moved()
        except OSError as e:
            raise NotReady("the writer's heartbeat stopped and %s is gone: %s" % (self.path, e))
        if moved:
            self._attach()
            self._current()

    def _record_at(self, slot):
        """Check the record a slot names against the arena; its offset,
        capacity, topic and key lengths, and where its data starts."""
        off = (slot & 0xFFFFFFFF) * 8
        if off < self._arena or off + RECORD_HEADER > self._end:
            raise Corrupt("a slot points at %d, outside the arena" % off)
        cap, tl, kl = _FIXED.unpack_from(self._m, off + 40)
        d = off + RECORD_HEADER + _align8(tl + kl)
        if cap % 8 or d + cap > self._end:
            raise Corrupt("the record at %d overruns the arena" % off)
        return off, cap, tl, kl, d

    def _read(self, off, cap, d):
        """_read_versioned's Entry (None if deleted), without the version."""
        return self._read_versioned(off, cap, d)[0]

    def _read_versioned(self, off, cap, d):
        """Steps 6 to 8: copy under the record's version; (Entry, or None
        if deleted, and the version read)."""
        m = self._m
        for attempt in range(SPIN_LIMIT):
            v1 = _U64.unpack_from(m, off)[0]
            if v1 & 1:
                if attempt > 100:
                    time.sleep(0)
                continue
            hlc, origin, seq, vl, tl, flags, _, _, _ = _FIELDS.unpack_from(m, off + 8)
            n = tl + vl
            data = m[d: d + min(n, cap)]
            if _U64.unpack_from(m, off)[0] != v1:
                continue
            if n > cap:
                raise Corrupt("the record at %d holds %d bytes in %d" % (off, n, cap))
            if flags & FLAG_DELETED:
                return None, v1
            return Entry(data[tl:], data[:tl], hlc, origin, seq), v1
        raise Busy("the record at %d" % off)

    def _find(self, topic, key):
        """Steps 2 to 5: the record of (topic, key) as (off, cap, d), or
        None when the key is not there."""
        m = self._m
        h = hash_key(topic, key)
        mask, arena, end = self._mask, self._arena, self._end
        want = topic + key
        i = h & mask
        for _ in range(mask + 1):
            slot = _u64(m, HEADER_SIZE + 8 * i)[0]
            if slot == 0:
                return None
            if slot >> 32 == h:
                off = (slot & 0xFFFFFFFF) * 8
                k = off + RECORD_HEADER
                if off < arena or k + len(want) > end or m[k:k + len(want)] != want:
                    self._record_at(slot)  # raises Corrupt for a bad record
                else:
                    off, cap, tl, kl, d = self._record_at(slot)
                    if tl == len(topic) and kl == len(key):
                        return off, cap, d
            i = (i + 1) & mask
        return None

    def get_many(self, topic, keys):
        """The Entries (None for a key not there) of keys, all of topic, or
        of topic[i] when topic is a list, as of one instant: a batch (an
        HTTP NDJSON batch, a Redis MSET) is seen whole or not at all. The
        doc's "Reading several keys": read the committed word, read every
        key, and if a version seen is of a write past the committed word,
        wait for it to be committed and read again (Busy after BATCH_WAIT)."""
        keys = [_bytes(k) for k in keys]
        if isinstance(topic, (list, tuple)):
            if len(topic) != len(keys):
                raise ValueError("%d topics for %d keys" % (len(topic), len(keys)))
            topics = [_bytes(t) for t in topic]
        else:
            topics = [_bytes(topic)] * len(keys)
        deadline = None
        while True:
            self._current()
            m = self._m
            committed = _u64(m, 152)[0]
            found = [self._find(t, k) for t, k in zip(topics, keys)]
            out, newest = [], 0
            for f in found:
                if f is None:
                    out.append(None)
                    continue
                e, version = self._read_versioned(*f)
                newest = max(newest, version)
                out.append(e)
            # A version is twice the number of its write.
            if newest // 2 <= committed:
                return out
            now = time.monotonic()
            if deadline is None:
                deadline = now + BATCH_WAIT
            elif now > deadline:
                raise Busy("the keys of get_many kept changing for %gs" % BATCH_WAIT)
            while _u64(m, 152)[0] < newest // 2 and not _u64(m, 64)[0] & STATE_SUPERSEDED:
                if time.monotonic() > deadline:
                    raise Busy("a batch stayed unfinished for %gs" % BATCH_WAIT)
                time.sleep(0)

    def get(self, topic, key):
        """The Entry of (topic, key), or None when it is not there. This is
        steps 1 to 9 of the doc, inlined: a Python call costs more than
        anything else here."""
        if type(topic) is str:
            topic = topic.encode()
        if type(key) is str:
            key = key.encode()
        m = self._m
        if m is None:
            raise Error("closed")
        if _u64(m, 64)[0] & 7 != STATE_READY:
            self._current()
            m = self._m
        self._reads += 1
        if self._reads % ORPHAN_CHECK_EVERY == 0:
            self._check_orphan()
            m = self._m
        # The hash: the CRC of (topic length, topic) is kept per topic.
        h = self._topic_crc.get(topic)
        if h is None:
            h = zlib.crc32(topic, zlib.crc32(_U16.pack(len(topic))))
            if len(self._topic_crc) < 1024:
                self._topic_crc[topic] = h
        h = zlib.crc32(key, h)
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & 0xFFFFFFFF
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & 0xFFFFFFFF
        h ^= h >> 16
        h = h or 1
        mask, arena, end = self._mask, self._arena, self._end
        want = topic + key
        wl = len(want)
        d_off = RECORD_HEADER + ((wl + 7) & ~7)
        i = h & mask
        for _ in range(mask + 1):
            slot = _u64(m, HEADER_SIZE + 8 * i)[0]
            if slot == 0:
                return None
            if slot >> 32 == h:
                # Steps 4 and 5: the topic and key follow the fixed fields.
                off = (slot & 0xFFFFFFFF) * 8
                k = off + RECORD_HEADER
                if off < arena or k + wl > end or m[k:k + wl] != want:
                    self._record_at(slot)  # raises Corrupt for a bad record
                else:
                    cap, tl, kl = _fixed(m, off + 40)
                    if tl == len(topic) and kl == len(key):
                        d = off + d_off
                        if cap % 8 or d + cap > end:
                            raise Corrupt("the record at %d overruns the arena" % off)
                        # Version, fields, data, version again (steps 6 to 8).
                        v1 = _u64(m, off)[0]
                        if not v1 & 1:
                            hlc, origin, seq, vl, tgl, flags, _, _, _ = _fields(m, off + 8)
                            n = tgl + vl
                            data = m[d:d + n]
                            if _u64(m, off)[0] == v1 and n <= cap:
                                if flags & FLAG_DELETED:
                                    return None
                                return Entry(data[tgl:], data[:tgl], hlc, origin, seq)
                        return self._read(off, cap, d)  # contended: the slow path
            i = (i + 1) & mask
        return None

    def scan(self, topic=None):
        """Yields (topic, key, Entry) for every live key (of topic, if set)."""
        if topic is not None:
            topic = _bytes(topic)
        self._current()
        m = self._m
        for i in range(self._mask + 1):
            slot = _U64.unpack_from(m, HEADER_SIZE + 8 * i)[0]
            if slot == 0:
                continue
            off, cap, tl, kl, d = self._record_at(slot)
            k = off + RECORD_HEADER
            t = m[k:k + tl]
            if topic is not None and t != topic:
                continue
            e = self._read(off, cap, d)
            if e is not None:
                yield t, m[k + tl:k + tl + kl], e

    def keys(self, topic):
        """The live keys of topic, sorted (bytes)."""
        return sorted(k for _, k, _ in self.scan(topic))

    def status(self):
        """The header's state and counters (read under the meta version)."""
        if self._m is None:
            raise Error("closed")
        try:
            self._current()
        except NotReady:
            pass
        m = self._m
        for _ in range(SPIN_LIMIT):
            v1 = _U64.unpack_from(m, 192)[0]
            if v1 & 1:
                continue
            state, = _U64.unpack_from(m, 64)
            heartbeat, pid = struct.unpack_from("<QQ", m, 128)
            keys, changes, last, alive, members, n = struct.unpack_from("<QQQIII", m, 200)
            n = min(n, MAX_ORIGINS)
            pairs = struct.unpack_from("<%dQ" % (2 * n), m, 240)
            if _U64.unpack_from(m, 192)[0] == v1:
                return {
                    "generation": self.generation,
                    "ready": state & 7 == STATE_READY,
                    "heartbeat": heartbeat / 1e9,
                    "writer_pid": pid,
                    "keys": keys,
                    "changes": changes,
                    "last_change": last / 1e9,
                    "alive": alive,
                    "members": members,
                    "away": state & 7 != STATE_READY and alive == 0 and members > 0,
                    "origins": dict(zip(pairs[0::2], pairs[1::2])),
                    "size": len(m),
                }
        raise Busy("the header")

    def fresh(self, max_age):
        """Raises NotReady or Stale unless the writer said the view was
        current less than max_age seconds ago (one stat, to notice a file
        replaced at the path)."""
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise NotReady("%s: %s" % (self.path, e))
        if (st.st_dev, st.st_ino) != self._ino:
            self._attach()
        self._current()
        heartbeat, pid = struct.unpack_from("<QQ", self._m, 128)
        age = time.time() - heartbeat / 1e9
        if age > max_age:
            raise Stale("the daemon (pid %d) last said it was current %.3fs ago (max %.3fs)" % (pid, age, max_age))

    def close(self):
        if self._m is not None:
            self._m.close()
            self._m = None


def _entry_json(topic, key, e):
    return json.dumps({
        "topic": topic.decode("latin-1"), "key": key.decode("latin-1"),
        "tag": e.tag.decode("latin-1"), "value": e.value.hex(),
        "hlc": e.hlc, "origin": e.origin, "seq": e.seq,
    }, sort_keys=True)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    view = View(argv[1])
    cmd = argv[2]
    try:
        if cmd == "get" and len(argv) == 5:
            e = view.get(argv[3].encode(), argv[4].encode())
            print("null" if e is None else _entry_json(argv[3].encode(), argv[4].encode(), e))
        elif cmd == "keys" and len(argv) == 4:
            for k in view.keys(argv[3].encode()):
                print(json.dumps(k.decode("latin-1")))
        elif cmd == "gets" and len(argv) == 3:
            for line in sys.stdin:
                t, k = (bytes.fromhex(x[1:]) for x in line.split())
                e = view.get(t, k)
                print("null" if e is None else _entry_json(t, k, e))
        elif cmd == "many" and len(argv) == 3:
            pairs = [tuple(bytes.fromhex(x[1:]) for x in line.split()) for line in sys.stdin]
            for (t, k), e in zip(pairs, view.get_many([t for t, _ in pairs], [k for _, k in pairs])):
                print("null" if e is None else _entry_json(t, k, e))
        elif cmd == "dump" and len(argv) == 3:
            for line in sorted(_entry_json(t, k, e) for t, k, e in view.scan()):
                print(line)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except Error as e:
        print("%s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
