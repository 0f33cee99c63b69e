"""Times the Python reader's Get: python3 bench_view.py PATH TOPIC KEYS N

Reads N random keys of the KEYS keys sku-000000000000.. (16 bytes, as the
Go benchmarks publish them) and prints the CPU and the wall nanoseconds a
Get took, on average. Exits 1 if a key is missing."""

import random
import sys
import time

import cachecast_view


def main(path, topic, keys, n):
    view = cachecast_view.View(path)
    rng = random.Random(1)
    names = [("sku-%012d" % rng.randrange(keys)).encode() for _ in range(n)]
    topic = topic.encode()
    get = view.get
    cpu, wall = time.process_time(), time.perf_counter()
    for k in names:
        if get(topic, k) is None:
            print("missing", k, file=sys.stderr)
            return 1
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print("%.0f %.0f" % (cpu / n * 1e9, wall / n * 1e9))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
