"""Run inside the test's "laptop" network namespace: attach a real DAP client to one rank.

    python dap_probe.py HOST PORT SCRIPT LINE EXPR [hold]

Sets a breakpoint at SCRIPT:LINE, waits for the stop, evaluates EXPR in the top
frame, removes the breakpoint, continues, detaches, and prints one JSON line.
With ``hold`` it prints the line and keeps the rank stopped until it is killed.
"""

import json
import sys
import time

from support.dap import DAPClient  # tests/support: PYTHONPATH from the test that runs this (support_env)

host, port, script, line, expr = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
c = DAPClient(host, port, timeout=120)
verified = c.attach({script: [line]})
stopped = c.wait_stopped(timeout=120)
frame = c.top_frame(stopped["threadId"])
value = c.evaluate(expr, frame["id"])
if sys.argv[6:] == ["hold"]:
    print(json.dumps({"line": frame["line"], "value": value}), flush=True)
    time.sleep(3600)
c.request("setBreakpoints", source={"path": script}, breakpoints=[])
c.continue_(stopped["threadId"])
c.disconnect()
print(
    json.dumps({"verified": verified[script]["breakpoints"][0]["verified"], "line": frame["line"], "value": value}),
    flush=True,
)
