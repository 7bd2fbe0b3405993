"""Run inside the test's "laptop" network namespace: all-stop across nodes, seen by plain DAP clients.

    python allstop_nodes_probe.py GO SCRIPT LINE STOPPER [PAUSED ...]     (each rank: HOST:PORT)

Attaches a client to each PAUSED rank (no breakpoints), then one to STOPPER with a breakpoint at SCRIPT:LINE.
Prints one JSON line once STOPPER stopped and every PAUSED rank's client got its ``stopped`` event (reasons,
and when each came, from one clock); waits for the file GO; then clears the breakpoint, continues STOPPER,
prints a second line once every PAUSED client got ``continued``, and detaches them all.
"""

import json
import os
import sys
import threading
import time

from support.dap import DAPClient  # tests/support: PYTHONPATH from the test that runs this (support_env)

go, script, line = sys.argv[1], sys.argv[2], int(sys.argv[3])
stopper_at, paused_at = sys.argv[4], sys.argv[5:]


def client(where: str) -> DAPClient:
    host, port = where.rsplit(":", 1)
    return DAPClient(host, int(port), timeout=120)


paused = [client(w) for w in paused_at]
events: dict[int, tuple[float, dict]] = {}


def wait_stopped(i: int, c: DAPClient) -> None:
    body = c.wait_stopped(180)
    events[i] = (time.monotonic(), body)


waiters = []
for i, c in enumerate(paused):
    c.attach()
    waiters.append(threading.Thread(target=wait_stopped, args=(i, c), daemon=True))
    waiters[-1].start()
stopper = client(stopper_at)
stopper.attach({script: [line]})
stopped = stopper.wait_stopped(120)
at = time.monotonic()
for t in waiters:
    t.join(max(1.0, at + 60 - time.monotonic()))  # a rank never paused: its client's entry says so below
frame = stopper.top_frame(stopped["threadId"])
got = [events.get(i) for i in range(len(paused))]
print(
    json.dumps(
        {
            "stopper": {"reason": stopped["reason"], "line": frame["line"]},
            "paused": [
                {"reason": e[1]["reason"], "line": c.top_frame(e[1]["threadId"])["line"], "after_s": e[0] - at}
                if e is not None
                else {"reason": None}
                for c, e in zip(paused, got, strict=True)
            ],
        }
    ),
    flush=True,
)
if None in got:
    sys.exit(1)
while not os.path.exists(go):
    time.sleep(0.05)
stopper.request("setBreakpoints", source={"path": script}, breakpoints=[])
stopper.continue_(stopped["threadId"])
for c in paused:
    c.event("continued", 60)
print(json.dumps({"continued": len(paused)}), flush=True)
for c in [stopper, *paused]:
    c.disconnect()
