"""``rank.warmup``: a lazy rank imports debugpy's server in the background after its delay -- and only
imports: no debugpy thread, no tracing, no hook, no listener -- then a first client attaches as before."""

import subprocess
import sys
import textwrap

import pytest

from rtdebug.rank.endpoint import warmup


def test_delay_defaults_parses_and_refuses_bad_values_in_one_line(capsys):
    assert warmup.delay_s({}) == warmup.DEFAULT_DELAY_S
    assert warmup.delay_s({"RTDEBUG_WARM_S": "0"}) == 0.0
    assert warmup.delay_s({"RTDEBUG_WARM_S": " 2.5 "}) == 2.5
    assert capsys.readouterr().err == ""
    for bad in ("-1", "soon", "nan"):
        assert warmup.delay_s({"RTDEBUG_WARM_S": bad}) == warmup.DEFAULT_DELAY_S
        err = capsys.readouterr().err
        assert err == f"rtdebug: ignoring RTDEBUG_WARM_S={bad!r} (want seconds >= 0; 0 = off); using 60\n"


def test_zero_is_off():
    assert warmup.schedule(0, lambda: True) is None


# A real process: the state debugpy could touch, before and after the background import.
PROGRAM = textwrap.dedent("""
    import os, signal, socket, sys, threading, time
    from rtdebug.rank.endpoint import Endpoint
    def fds():
        out = []
        for f in os.listdir("/proc/self/fd"):
            try:
                out.append(os.readlink(f"/proc/self/fd/{f}").split(":")[0])
            except OSError:  # listdir's own descriptor, gone by now
                pass
        return sorted(out)
    def state():
        return dict(threads=sorted(t.name for t in threading.enumerate()), fds=fds(), trace=repr(sys.gettrace()),
                    hook=repr(threading._trace_hook), excepthook=repr(sys.excepthook),
                    sigint=repr(signal.getsignal(signal.SIGINT)), debugger=PYDEVD())
    def PYDEVD():
        m = sys.modules.get("pydevd")
        return repr(None if m is None else m.get_global_debugger())
    ep = Endpoint("127.0.0.1", int(sys.argv[1]))
    ep.start(warm_after=float(sys.argv[2]))
    before = state()
    before["threads"] = [t for t in before["threads"] if t != "rtdebug-warmup"]  # waiting; it ends after
    print("LOADED_AT_START", "debugpy.server.api" in sys.modules, flush=True)
    end = time.monotonic() + float(sys.argv[3])
    while time.monotonic() < end:
        sum(range(1000))
    give_up = time.monotonic() + 120  # a slow machine: the import (at the normal switch interval) may run on
    while sys.argv[4] == "1" and any(t.name == "rtdebug-warmup" for t in threading.enumerate()) and (
        time.monotonic() < give_up
    ):
        sum(range(1000))
    after = state()
    print("LOADED", "debugpy.server.api" in sys.modules, flush=True)
    print("LAZY", ep.lazy, flush=True)
    for k in before:
        if before[k] != after[k]:
            print("CHANGED", k, before[k], after[k], flush=True)
    print("READY", flush=True)
    time.sleep(60)
""")


def _run(tmp_path, port: int, warm: float, run: float, finish: bool = False) -> tuple[subprocess.Popen, list[str]]:
    """The program, until READY; ``finish``: it also waits (bounded) for the warm-up thread to end."""
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    p = subprocess.Popen(
        [sys.executable, str(script), str(port), str(warm), str(run), "1" if finish else "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    assert p.stdout is not None
    for line in p.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("READY"):
            break
    return p, lines


@pytest.mark.e2e
def test_imports_after_the_delay_and_changes_nothing_else_then_attach_works(tmp_path, port_base):
    from support.dap import DAPClient

    p, lines = _run(tmp_path, port_base, 0.3, 3.0, finish=True)
    try:
        assert "LOADED_AT_START False" in lines, lines
        assert "LOADED True" in lines, lines  # imported in the background
        assert "LAZY True" in lines, lines  # ... but not started: no client came
        # the warm-up thread itself has ended; nothing else of the process changed
        assert [x for x in lines if x.startswith("CHANGED")] == [], lines
        c = DAPClient("127.0.0.1", port_base)
        c.attach({})
        assert any(t["name"] == "MainThread" for t in c.request("threads")["threads"])
        c.disconnect()
    finally:
        p.kill()
        p.wait()


@pytest.mark.e2e
def test_off_or_not_yet_means_not_imported(tmp_path, port_base):
    p, lines = _run(tmp_path, port_base, 0, 1.0)
    p.kill()
    p.wait()
    assert "LOADED False" in lines, lines
    p, lines = _run(tmp_path, port_base + 1, 30, 1.0)
    p.kill()
    p.wait()
    assert "LOADED False" in lines, lines
