"""Drives redlock-py (https://pypi.org/project/redlock-py/) for tests/interop.rs.

One Redlock operation per call, on the nodes 127.0.0.1:PORT for each of PORTS
(comma-separated):

    redlock_py.py lock PORTS RESOURCE TTL_MS
        One attempt. Prints the lock's value (its token) and exits 0, or prints
        "refused" and exits 3.
    redlock_py.py unlock PORTS RESOURCE VALUE
        Unlocks as redlock-py does (compare-and-delete on every node) with a lock
        object carrying VALUE, ours or not. Exits 0.
"""

import sys

import redlock


def main(argv):
    if len(argv) != 5 or argv[1] not in ("lock", "unlock"):
        print(__doc__, file=sys.stderr)
        return 2
    op, ports, resource, arg = argv[1:]
    servers = [
        {"host": "127.0.0.1", "port": int(port), "socket_timeout": 2}
        for port in ports.split(",")
    ]
    dlm = redlock.Redlock(servers, retry_count=1, retry_delay=0.01)
    if op == "lock":
        lock = dlm.lock(resource, int(arg))
        if not lock:
            print("refused")
            return 3
        print(lock.key.decode())
        return 0
    dlm.unlock(redlock.Lock(0, resource, arg.encode()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
