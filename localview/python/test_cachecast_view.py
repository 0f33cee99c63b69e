"""Tests of the Python reader. The files are made by a small writer of the
format below (from localview/doc.go); localview's Go tests also run this
reader on files the Go writer made and compare the results."""

import os
import random
import struct
import tempfile
import time
import unittest

import cachecast_view as cv


def build(entries, slots=64, state=cv.STATE_READY, heartbeat=None, gen=1, origins=(), committed=None, alive=1):
    """A view file holding entries: (topic, key, tag, value, (hlc, origin,
    seq), deleted), the i-th written by write i+1 (version 2i+2); the
    committed word is the last write unless given. Returns a bytearray and
    the record offset of each."""
    arena_off = cv.HEADER_SIZE + 8 * slots
    arena = bytearray()
    table = [0] * slots
    offsets = []
    for topic, key, tag, value, (hlc, origin, seq), deleted in entries:
        off = arena_off + len(arena)
        cap = (len(tag) + len(value) + 7) & ~7
        rec = struct.pack("<QQQQIHHIHH", 2 * (len(offsets) + 1), hlc, origin, seq, len(value), len(tag),
                          cv.FLAG_DELETED if deleted else 0, cap, len(topic), len(key))
        data = (tag + value).ljust(cap, b"\0")
        tk = topic + key
        rec += tk.ljust((len(tk) + 7) & ~7, b"\0") + data
        arena += rec
        h = cv.hash_key(topic, key)
        i = h & (slots - 1)
        while table[i]:
            i = (i + 1) & (slots - 1)
        table[i] = h << 32 | off // 8
        offsets.append(off)
    size = arena_off + len(arena)
    header = bytearray(cv.HEADER_SIZE)
    struct.pack_into("<8sIIQQQQQQQ", header, 0, cv.MAGIC, cv.VERSION, cv.HEADER_SIZE, size, gen,
                     cv.HEADER_SIZE, slots, arena_off, len(arena), state)
    hb = time.time() if heartbeat is None else heartbeat
    struct.pack_into("<QQ", header, 128, int(hb * 1e9), 4242)
    struct.pack_into("<Q", header, 152, len(entries) if committed is None else committed)
    struct.pack_into("<QQQIII", header, 200, len(entries), 7, 0, alive, 3, len(origins))
    for j, (o, h) in enumerate(origins):
        struct.pack_into("<QQ", header, 240 + 16 * j, o, h)
    out = header + b"".join(struct.pack("<Q", s) for s in table) + arena
    return out, offsets


ENTRIES = [
    (b"prices", b"sku-1", b"eu", b"12.50", (100, 7, 1), False),
    (b"prices", b"sku-2", b"", b"a longer value, more than a word", (101, 7, 2), False),
    (b"prices", b"gone", b"", b"", (102, 8, 1), True),
    (b"fx", b"sku-1", b"", b"1.08", (103, 8, 2), False),
    (b"prices", b"", b"", b"", (104, 8, 3), False),
]


class HashTest(unittest.TestCase):
    def test_vectors(self):
        # The same values as localview's TestHash (Go).
        for topic, key, want in [(b"prices", b"sku-1", 2781460982), (b"", b"", 2259668196),
                                 (b"fx", b"eur/usd", 3588776657)]:
            self.assertEqual(cv.hash_key(topic, key), want)


class ReaderTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "view")

    def tearDown(self):
        self.dir.cleanup()

    def write(self, data, path=None):
        with open(path or self.path, "wb") as f:
            f.write(data)

    def test_get(self):
        data, _ = build(ENTRIES, origins=[(7, 101), (8, 104)])
        self.write(data)
        v = cv.View(self.path)
        self.assertEqual(v.get("prices", "sku-1"), cv.Entry(b"12.50", b"eu", 100, 7, 1))
        self.assertEqual(v.get(b"prices", b"sku-2").value, b"a longer value, more than a word")
        self.assertEqual(v.get("fx", "sku-1").value, b"1.08")
        self.assertIsNone(v.get("prices", "gone"))
        self.assertIsNone(v.get("prices", "missing"))
        self.assertEqual(v.get("prices", "").value, b"")
        self.assertEqual(v.keys("prices"), [b"", b"sku-1", b"sku-2"])
        st = v.status()
        self.assertTrue(st["ready"])
        self.assertEqual(st["origins"], {7: 101, 8: 104})
        self.assertEqual((st["alive"], st["members"], st["writer_pid"]), (1, 3, 4242))
        v.fresh(60)
        v.close()

    def test_get_many(self):
        self.write(build(ENTRIES)[0])
        v = cv.View(self.path)
        self.assertEqual(v.get_many("prices", ["sku-1", "gone", "missing", "sku-2"]),
                         [v.get("prices", "sku-1"), None, None, v.get("prices", "sku-2")])
        self.assertEqual(v.get_many(["fx", "prices"], ["sku-1", "sku-1"]),
                         [v.get("fx", "sku-1"), v.get("prices", "sku-1")])
        with self.assertRaises(ValueError):
            v.get_many(["fx"], ["a", "b"])
        v.close()

    def test_get_many_waits_for_the_batch(self):
        # Entries 4 and 5 are writes of a batch not committed yet: a read of
        # entry 1 alone is fine, one with entry 5 waits, then gives up.
        self.write(build(ENTRIES, committed=3)[0])
        v = cv.View(self.path)
        self.assertEqual(v.get_many("prices", ["sku-1"]), [v.get("prices", "sku-1")])
        old, cv.BATCH_WAIT = cv.BATCH_WAIT, 0.05
        try:
            with self.assertRaises(cv.Busy):
                v.get_many("prices", ["sku-1", ""])
        finally:
            cv.BATCH_WAIT = old
        v.close()

    def test_not_ready_closed_stale(self):
        for state, exc in [(0, cv.NotReady), (cv.STATE_CLOSED | cv.STATE_READY, cv.NotReady)]:
            self.write(build(ENTRIES, state=state)[0])
            v = cv.View(self.path)
            with self.assertRaises(exc):
                v.get("prices", "sku-1")
            v.close()
        self.write(build(ENTRIES, heartbeat=time.time() - 10)[0])
        v = cv.View(self.path)
        with self.assertRaises(cv.Stale):
            v.fresh(1)
        self.assertEqual(v.get("prices", "sku-1").value, b"12.50")

    def test_away(self):
        # Not ready with no alive member of 3 known: the node left its cluster.
        self.write(build(ENTRIES, state=0, alive=0)[0])
        v = cv.View(self.path)
        for read in (lambda: v.get("prices", "sku-1"), lambda: v.fresh(1)):
            with self.assertRaisesRegex(cv.Away, "left its cluster"):
                read()
        self.assertTrue(v.status()["away"])
        v.close()
        self.write(build(ENTRIES, state=0)[0])  # loading: not ready, not away
        v = cv.View(self.path)
        with self.assertRaises(cv.NotReady) as cm:
            v.get("prices", "sku-1")
        self.assertNotIsInstance(cm.exception, cv.Away)
        self.assertFalse(v.status()["away"])
        v.close()

    def test_follows_superseded(self):
        self.write(build(ENTRIES, gen=1)[0])
        v = cv.View(self.path)
        self.assertEqual(v.generation, 1)
        # The writer's order: the new file renamed in, then the old marked.
        newer = list(ENTRIES)
        newer[0] = (b"prices", b"sku-1", b"", b"13.00", (200, 7, 3), False)
        tmp = self.path + ".2.tmp"
        self.write(build(newer, gen=2)[0], tmp)
        with open(self.path, "r+b") as old:
            os.rename(tmp, self.path)
            old.seek(64)
            old.write(struct.pack("<Q", cv.STATE_READY | cv.STATE_SUPERSEDED))
        self.assertEqual(v.get("prices", "sku-1").value, b"13.00")
        self.assertEqual(v.generation, 2)

    def test_orphaned_file(self):
        # A file nobody superseded that is no longer the path's, with an old
        # heartbeat: noticed within ORPHAN_CHECK_EVERY gets.
        self.write(build(ENTRIES, heartbeat=time.time() - 10)[0])
        v = cv.View(self.path)
        self.assertEqual(v.get("prices", "sku-1").value, b"12.50")
        os.remove(self.path)
        newer = list(ENTRIES)
        newer[0] = (b"prices", b"sku-1", b"", b"14.00", (300, 7, 4), False)
        self.write(build(newer, gen=1, heartbeat=time.time() - 10)[0])
        got = [v.get("prices", "sku-1").value for _ in range(cv.ORPHAN_CHECK_EVERY)]
        self.assertEqual(got[-1], b"14.00")
        self.assertEqual(set(got), {b"12.50", b"14.00"})
        os.remove(self.path)
        v._next_stat = 0
        with self.assertRaises(cv.NotReady):
            for _ in range(cv.ORPHAN_CHECK_EVERY):
                v.get("prices", "sku-1")

    def test_closed_orphan_follows_the_path(self):
        # A closed file nobody superseded, a new one at the path: followed.
        self.write(build(ENTRIES, state=cv.STATE_CLOSED)[0])
        v = cv.View(self.path)
        with self.assertRaises(cv.NotReady):
            v.get("prices", "sku-1")
        os.remove(self.path)
        v._next_stat = 0
        with self.assertRaises(cv.NotReady):  # no file at the path: still not ready
            v.get("prices", "sku-1")
        newer = list(ENTRIES)
        newer[0] = (b"prices", b"sku-1", b"", b"15.00", (400, 7, 5), False)
        self.write(build(newer)[0])
        v._next_stat = 0
        self.assertEqual(v.get("prices", "sku-1").value, b"15.00")

    def test_odd_version_is_busy(self):
        data, offs = build(ENTRIES)
        struct.pack_into("<Q", data, offs[0], 1)  # a writer died mid-update
        self.write(data)
        v = cv.View(self.path)
        old = cv.SPIN_LIMIT
        cv.SPIN_LIMIT = 200
        try:
            with self.assertRaises(cv.Busy):
                v.get("prices", "sku-1")
        finally:
            cv.SPIN_LIMIT = old
        self.assertEqual(v.get("fx", "sku-1").value, b"1.08")

    def test_damaged(self):
        good, offs = build(ENTRIES)
        slot_of = {}
        for i in range(64):
            s = struct.unpack_from("<Q", good, cv.HEADER_SIZE + 8 * i)[0]
            if s:
                slot_of[(s & 0xFFFFFFFF) * 8] = cv.HEADER_SIZE + 8 * i
        cases = {
            "magic": lambda d: d.__setitem__(slice(0, 1), b"X"),
            "version": lambda d: struct.pack_into("<I", d, 8, 1),  # the old layout
            "file size": lambda d: struct.pack_into("<Q", d, 16, len(d) + 1),
            "slot count": lambda d: struct.pack_into("<Q", d, 40, 3),
            "slot count huge": lambda d: struct.pack_into("<Q", d, 40, 1 << 40),
            "arena": lambda d: struct.pack_into("<Q", d, 48, 8),
            "slot outside": lambda d: struct.pack_into("<Q", d, slot_of[offs[0]],
                                                       cv.hash_key(b"prices", b"sku-1") << 32 | 0xFFFFFFF),
            "capacity": lambda d: struct.pack_into("<I", d, offs[0] + 40, 1 << 30),
            "lengths": lambda d: struct.pack_into("<I", d, offs[0] + 32, 1 << 20),
            "truncated": lambda d: d.__delitem__(slice(100, None)),
        }
        for name, damage in cases.items():
            with self.subTest(name):
                d = bytearray(good)
                damage(d)
                self.write(d)
                try:
                    v = cv.View(self.path)
                    v.get("prices", "sku-1")
                    self.fail("no error")
                except cv.Corrupt:
                    pass

    def test_not_a_file(self):
        os.mkfifo(self.path)
        with self.assertRaises(cv.Corrupt):
            cv.View(self.path)  # neither hangs nor maps it
        os.remove(self.path)
        os.mkdir(self.path)
        with self.assertRaises((cv.Corrupt, OSError)):
            cv.View(self.path)

    def test_random_mutations_never_crash(self):
        good, _ = build(ENTRIES)
        rng = random.Random(1)
        for _ in range(300):
            d = bytearray(good)
            for _ in range(rng.randint(1, 8)):
                if rng.random() < 0.5:
                    d[rng.randrange(len(d))] = rng.randrange(256)
                else:
                    # Hit the fields that matter most: header and slots.
                    d[rng.randrange(cv.HEADER_SIZE + 8 * 64)] = rng.randrange(256)
            self.write(d)
            try:
                v = cv.View(self.path)
                v.get("prices", "sku-1")
                list(v.scan())
                v.status()
            except cv.Error:
                pass


class PlatformTest(unittest.TestCase):
    def test_refuses_weakly_ordered_cpus(self):
        # The version checks are sound only where loads are not reordered
        # with loads (x86): elsewhere the import fails, loudly.
        import subprocess
        import sys
        here = os.path.dirname(os.path.abspath(cv.__file__))
        for machine, ok in [("aarch64", False), ("arm64", False), ("ppc64le", False), ("x86_64", True)]:
            code = ("import platform; platform.machine = lambda: %r\n"
                    "try:\n    import cachecast_view\nexcept ImportError as e:\n    print('refused:', e)\n"
                    "else:\n    print('imported')" % machine)
            out = subprocess.run([sys.executable, "-c", code], cwd=here, capture_output=True, text=True, check=True).stdout
            with self.subTest(machine):
                if ok:
                    self.assertEqual(out.strip(), "imported")
                else:
                    self.assertIn("refused: cachecast_view reads the shared view only on x86", out)


if __name__ == "__main__":
    unittest.main()
