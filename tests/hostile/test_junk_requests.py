"""What junk at the request key costs a rank: anyone who reaches a job's c10d store can write 8 MB where
every rank's dump watcher (``rtdebug.rank.stacks.watch``) waits for the next request. The rank refuses it
from its length, before a byte of it reaches Python, and goes on answering genuine requests.

The cost is the rank process's own CPU time (user + system of its threads, from /proc through psutil),
measured around the junk; never wall-clock time. The main thread is left out: here it only answers the
test's "which number have you passed?" (test scaffolding; a real rank's main thread trains). Reading
and parsing each 8 MB value, as ranks once did, cost ~0.16 CPU-s each: 1.6 s for this run, against the
bound of 0.05 s for all of it.
"""

from __future__ import annotations

import subprocess
import time
from datetime import timedelta

import psutil
import pytest

from rtdebug.registry.tcpstore import TCPStoreClient
from rtdebug.stacks import jobwide, wire

from support.paths import PY

SECRET = "junk-test-secret-0123456789abcdef"
RUN = "junk"
JUNK = 10  # 8 MB values, two a second
# a rank with only its dump watcher; the test asks it (one line on stdin) which request number it has passed
RANK = """
import sys
from rtdebug.rank.stacks.watch import StoreWatch
w = StoreWatch("127.0.0.1", int(sys.argv[1]), "junk", 0, sys.argv[2], {"hostname": "h"}).start()
for _ in sys.stdin:
    print(w.last_n, flush=True)
"""


@pytest.fixture
def store():
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))


def cpu_s(pid: int) -> float:
    """CPU seconds of every thread of ``pid`` but its main one."""
    return sum(t.user_time + t.system_time for t in psutil.Process(pid).threads() if t.id != pid)


def test_8mb_junk_requests_at_2_per_second_cost_a_rank_almost_nothing(store, tmp_path):
    script = tmp_path / "rank_main.py"
    script.write_text(RANK)
    rank = subprocess.Popen([PY, str(script), str(store.port), SECRET], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert rank.stdin is not None and rank.stdout is not None
    session = {"session_id": "s", "rdzv_id": RUN, "store": "x", "ranks": [{"rank": 0, "state": "ready", "pid": 0}]}

    def passed() -> int:
        rank.stdin.write(b"?\n")  # type: ignore[union-attr]
        rank.stdin.flush()  # type: ignore[union-attr]
        return int(rank.stdout.readline())  # type: ignore[union-attr]

    def answered(c: TCPStoreClient) -> bool:
        return jobwide.from_store(c, session, [SECRET], timeout=10)["groups"] != []

    try:
        with TCPStoreClient("127.0.0.1", store.port, timeout=30) as c:
            deadline = time.monotonic() + 60
            while not answered(c):  # the watcher is connected, and has answered once (imports done)
                assert time.monotonic() < deadline and rank.poll() is None
            before = cpu_s(rank.pid)
            start = time.monotonic()
            for i in range(JUNK):
                # the rate asked of this test (2 a second); the rank is never waited on by time
                time.sleep(max(0.0, start + i / 2 - time.monotonic()))
                n = c.add(wire.dump_seq_key(RUN), 1)  # as a requester numbers one
                c.set(wire.dump_key(RUN, n), b"{" * (8 << 20))
                while passed() < n:  # the rank has taken it in (or passed over it)
                    assert rank.poll() is None
                    time.sleep(0.01)
            junk_cpu = cpu_s(rank.pid) - before
            assert answered(c), "a rank that was sent junk must still answer a genuine request"
            for n in range(1, c.add(wire.dump_seq_key(RUN), 0) + 1):
                c.delete_key(wire.dump_key(RUN, n))
        assert junk_cpu <= 0.05, f"{JUNK} junk requests of 8 MB cost the rank {junk_cpu:.3f} CPU-s"
    finally:
        rank.kill()
        rank.wait()
