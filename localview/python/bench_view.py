"""Times the Python reader's Get: python3 bench_view.py PATH TOPIC KEYS N

Reads N keys, cycling over 100,000 (or N if fewer) picked at random among
the KEYS keys sku-000000000000.. (16 bytes, as the Go benchmarks publish
them), and prints the CPU and the wall nanoseconds a Get took, on average.
The list is made before the clock starts, so the loop allocates nothing
that grows with N (for strace -c). Exits 1 if a key is missing."""

import random
import sys
import time

import cachecast_view


def main(path, topic, keys, n):
    view = cachecast_view.View(path)
    rng = random.Random(1)
    names = [("sku-%012d" % rng.randrange(keys)).encode() for _ in range(min(n, 100000))]
    topic = topic.encode()
    get = view.get
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(n):
        if get(topic, names[i % len(names)]) is None:
            print("missing", names[i % len(names)], file=sys.stderr)
            return 1
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print("%.0f %.0f" % (cpu / n * 1e9, wall / n * 1e9))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
