"""redis-py (Debian's python3-redis) against a cachecast Redis door.

Run by test/clients_test.go: python3 redis_py.py SOCKET PREFIX. Prints
"ok" when every check passed; exits non-zero with the failed check
otherwise.
"""
import sys

import redis


def main():
    sock, prefix = sys.argv[1], sys.argv[2]
    r = redis.Redis(unix_socket_path=sock, decode_responses=True)
    k = lambda name: prefix + ":" + name

    # Plain commands.
    assert r.set(k("plain"), "1") is True
    assert r.get(k("plain")) == "1", r.get(k("plain"))

    # The default pipeline is a transaction: MULTI, the commands, EXEC.
    with r.pipeline() as p:
        p.set(k("a"), "1")
        p.set(k("b"), "2")
        p.get(k("a"))
        got = p.execute()
    assert got == [True, True, "1"], got
    assert r.mget(k("a"), k("b")) == ["1", "2"]

    # A pipeline without a transaction.
    with r.pipeline(transaction=False) as p:
        p.set(k("c"), "3")
        p.get(k("c"))
        got = p.execute()
    assert got == [True, "3"], got

    # MULTI by hand after WATCH (a check-and-set on this node's view).
    with r.pipeline() as p:
        p.watch(k("a"))
        v = int(p.get(k("a")))
        p.multi()
        p.set(k("a"), str(v + 1))
        got = p.execute()
    assert got == [True], got
    assert r.get(k("a")) == "2", r.get(k("a"))
    print("ok")


if __name__ == "__main__":
    main()
