"""Section 4: 16 local ranks: register + attachable, then the registry's cost per rank."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.suite.common import BENCH, HOST, LOOP, READY, WORK, log, summary
from bench.suite.jobs import Run, attach_all, disconnect_all, guarded


def many_ranks(res: dict, reps: int, n: int = 16) -> None:
    from rtdebug.registry.files import Registry

    d: dict[str, list] = {"ready": [], "attach_all": [], "rank_bytes": [], "boot_to_ready": [], "spawn_to_record": []}
    for rep in range(reps):
        log(f"4 rep {rep + 1}/{reps}: {n} local ranks")

        def go():
            r = Run("lazy", n, ["--mode", "py", "--warmup-steps", "100", "--windows", "0", "--hold"])
            try:
                sid = r.session_id()
                d["ready"].append(r.job.wait_line(READY, 5) - r.job.t_launch)
                reg = Registry(r.registry)
                ranks = reg.ranks(sid)
                assert len(ranks) == n and all(x["state"] == "ready" for x in ranks), ranks
                files = [reg.rank_path(sid, x["rank"]) for x in ranks]
                d["rank_bytes"].append(statistics.mean(f.stat().st_size for f in files))
                d["boot_to_ready"].append(statistics.median(x["updated_at"] - x["started_at"] for x in ranks))
                d["spawn_to_record"].append(statistics.median(x["started_at"] - x["create_time"] for x in ranks))
                t0 = time.time()
                clients, done = attach_all([x["port"] for x in ranks], timeout=120)
                d["attach_all"].append(max(done) - t0)
                disconnect_all(clients)
            finally:
                r.close()

        guarded(res, f"{n} ranks rep {rep + 1}", go)

    # registry cost, measured in this process on entries shaped like the real ones
    tmp = Path(tempfile.mkdtemp(dir=WORK))
    reg = Registry(tmp)
    entry = {
        "schema_version": 1,
        "kind": "rank",
        "pid": os.getpid(),
        "create_time": time.time(),
        "state": "ready",
        "attach_count": 0,
        "started_at": time.time(),
        "updated_at": time.time(),
        "exit_code": None,
        "error": None,
        "session_id": "20260101-000000-abcd",
        "rank": 0,
        "local_rank": 0,
        "node_rank": 0,
        "world_size": n,
        "host": HOST,
        "port": 41000,
        "lazy": True,
        "wait": False,
        "script": str(LOOP),
        "cwd": str(BENCH),
    }
    writes = []
    for i in range(300):
        e = dict(entry, rank=i % n)
        t = time.perf_counter()
        reg.write_rank(e)
        writes.append(time.perf_counter() - t)
    reads = []
    for _ in range(100):
        t = time.perf_counter()
        got = reg.ranks(str(entry["session_id"]))
        reads.append(time.perf_counter() - t)
    assert len(got) == n
    shutil.rmtree(tmp, ignore_errors=True)
    res["many"] = {
        "n": n,
        "abs": {k: summary(v) for k, v in d.items()},
        "raw": d,
        "write_us": summary([w * 1e6 for w in writes]),
        "read_all_ms": summary([x * 1e3 for x in reads]),
        "writes_per_rank": "2 to ready (starting, ready); +1 per attach and per detach; +1 at exit",
    }
