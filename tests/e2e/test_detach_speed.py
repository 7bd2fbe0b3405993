"""After the last client leaves, a rank runs untraced (full speed on 3.11); the next client still stops.

A real process with a lazy (or eager: debugpy started, nobody attached) endpoint reports, every step,
whether ``sys.gettrace()`` is None in its main thread, in a thread that was running before the first
attach, and in a thread started while detached.
A real DAP client attaches (breakpoint hit), detaches, and the report must turn untraced; a re-attach
must stop at the breakpoint again; a client that vanishes without ``disconnect`` counts as detached too.
On 3.12+ pydevd uses ``sys.monitoring`` (``sys.gettrace()`` is None throughout), so only the stops are
checked there.
"""

import json
import subprocess
import sys
import textwrap
import time

import pytest

from support.dap import DAPClient
from support.ports import port_free

pytestmark = pytest.mark.e2e

SETTRACE = sys.version_info < (3, 12)

PROGRAM = textwrap.dedent("""
    import json, os, sys, threading, time
    from rtdebug.rank.endpoint import Endpoint
    ep = Endpoint("127.0.0.1", int(sys.argv[1]))
    ep.start(eager=sys.argv[3] == "eager")
    report, seen = sys.argv[2], {}
    def work(i):
        x = i * 2  # BREAK
        return x
    def spin(name):
        while True:
            seen[name] = sys.gettrace() is None
            work(0)
            time.sleep(0.01)
    threading.Thread(target=spin, args=("early",), daemon=True).start()
    late = None
    for i in range(100000):
        work(i)
        if late is None and os.path.exists(report + ".start-late"):
            late = threading.Thread(target=spin, args=("late",), daemon=True)
            late.start()
        state = dict(seen, main=sys.gettrace() is None, step=i)
        with open(report + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(report + ".tmp", report)
        time.sleep(0.01)
""")


def _line(script) -> int:
    return next(i for i, s in enumerate(script.read_text().splitlines(), 1) if "# BREAK" in s)


def _state(report) -> dict:
    try:
        return json.loads(report.read_text())
    except (OSError, ValueError):
        return {}  # not written yet (an eager rank starts debugpy first), or being replaced


def _wait_state(report, want: dict, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        s = _state(report)
        if all(s.get(k) == v for k, v in want.items()):
            return s
        if time.monotonic() > deadline:
            raise AssertionError(f"rank never reported {want}; last report {s}")
        time.sleep(0.05)


def _stop_once(port: int, script, line: int, vanish: bool = False) -> None:
    """Attach, stop at the breakpoint, then leave (clean disconnect, or the socket just closes)."""
    c = DAPClient("127.0.0.1", port)
    c.attach({str(script): [line]})
    stopped = c.wait_stopped(60)
    assert c.top_frame(stopped["threadId"])["line"] == line
    if vanish:
        c.close()  # no disconnect: the endpoint resumes the rank itself
        return
    c.request("setBreakpoints", source={"path": str(script)}, breakpoints=[])
    c.continue_(stopped["threadId"])
    c.disconnect()


@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_untraced_after_detach_and_reattach_stops(tmp_path, port_base, mode):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    report = tmp_path / "state.json"
    line = _line(script)
    log = open(tmp_path / "out.log", "w+")
    p = subprocess.Popen(
        [sys.executable, str(script), str(port_base), str(report), mode], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        _wait_state(report, {"main": True, "early": True})  # nothing traced before a client, eager too
        _stop_once(port_base, script, line)
        if SETTRACE:
            _wait_state(report, {"main": True, "early": True})
            (tmp_path / "state.json.start-late").touch()
            _wait_state(report, {"main": True, "early": True, "late": True})
        # re-attach: tracing is back on while attached, and the breakpoint stops the rank again
        c = DAPClient("127.0.0.1", port_base)
        c.attach({})
        if SETTRACE:
            _wait_state(report, {"main": False, "early": False, "late": False})
        c.disconnect()
        _stop_once(port_base, script, line, vanish=True)
        if SETTRACE:
            _wait_state(report, {"main": True, "early": True, "late": True})
        _stop_once(port_base, script, line)
        assert p.poll() is None, "the rank died"
    finally:
        p.kill()
        p.wait()
        log.seek(0)
        out = log.read()
    assert "could not" not in out, out
    assert port_free(port_base)
