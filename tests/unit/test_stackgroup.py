"""Parsing, grouping and formatting of faulthandler dumps (rtdebug.stacks.group, stacks.text, stacks.arm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from rtdebug.common.config import RankConfig
from rtdebug.common.errors import HarnessError
from rtdebug.common.paths import PACKAGE_DIR
from rtdebug.rank.collectives import mismatch as collectives
from rtdebug.stacks import contract
from rtdebug.stacks import group as stackgroup
from rtdebug.stacks import text as stacktext

from support.paths import ROOT

DUMPER = textwrap.dedent("""
    import json, os, signal, sys, threading, time
    from pathlib import Path
    from rtdebug.rank.stacks import dump as stacks

    info = stacks.arm(Path(sys.argv[1]), 3)
    ready = threading.Event()

    def helper():
        ready.set()
        time.sleep(60)  # HELPER LINE

    threading.Thread(target=helper, daemon=True).start()
    ready.wait()

    def inner():
        os.kill(os.getpid(), info["signal"])  # KILL LINE
        time.sleep(0.2)

    inner()
    print(json.dumps(info))
""")


@pytest.fixture(scope="module")
def real_dump(tmp_path_factory):
    """A real faulthandler dump from a process that armed itself with stacks.arm."""
    d = tmp_path_factory.mktemp("dump")
    script = d / "dumper.py"
    script.write_text(DUMPER)
    out = subprocess.run(
        [sys.executable, str(script), str(d)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    text = (d / info["file"]).read_text()
    lines = script.read_text().splitlines()
    kill = next(i for i, t in enumerate(lines, 1) if "KILL LINE" in t)
    helper = next(i for i, t in enumerate(lines, 1) if "HELPER LINE" in t)
    return info, text, str(script), kill, helper


def test_arm_writes_a_whole_dump_of_every_thread(real_dump):
    info, text, script, kill, helper = real_dump
    assert info["file"] == "stacks-3.txt" and info["signal"] == contract.SIGNAL
    threads = stackgroup.parse_dump(text)
    assert len(threads) == 3  # newest first: the helper, rtdebug's dump thread (blocked on its FIFO), main
    assert stackgroup.own_thread(threads[1]) and not stackgroup.own_thread(threads[0])
    main = stackgroup.main_thread(threads, info["main_thread"])
    assert main is threads[-1] and main["current"]
    assert (main["frames"][0]["function"], main["frames"][0]["line"]) == ("inner", kill)
    assert main["frames"][0]["file"] == script and main["frames"][0]["kind"] == "user"
    other = threads[0]
    assert (other["frames"][0]["function"], other["frames"][0]["line"]) == ("helper", helper)
    assert other["frames"][-1]["kind"] == "library"  # threading.py
    assert stackgroup.dump_complete(text, info["main_thread"], info["bottom"])


def test_a_cut_dump_is_not_complete(real_dump):
    info, text, *_ = real_dump
    lines = text.splitlines(keepends=True)
    for cut in range(1, len(lines)):
        assert not stackgroup.dump_complete("".join(lines[:cut]), info["main_thread"], info["bottom"])
    assert not stackgroup.dump_complete(text[:-1], info["main_thread"], info["bottom"])


def frames(*spec):
    return [stackgroup.frame(f, line, fn) for f, line, fn in spec]


TORCH = "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
LOGGER = "/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py"
PYDEVD = "/v/lib/python3.11/site-packages/debugpy/_vendored/pydevd/pydevd.py"
THREADING = "/usr/lib/python3.11/threading.py"
BOOT = PACKAGE_DIR + "rank/bootstrap.py"


def dump(top, line):
    """A rank's main thread: <top> <- train_step (train.py:line) <- main (train.py:60) <- harness <- runpy."""
    tail = [
        ("/job/train.py", 60, "<module>"),
        ("<frozen runpy>", 88, "_run_code"),
        (BOOT, 37, "execute"),
        ("<frozen runpy>", 198, "_run_module_as_main"),
    ]
    return {
        "main_id": "0x1",
        "threads": [
            {
                "id": "0x00000001",
                "current": True,
                "truncated": False,
                "frames": frames(*top, ("/job/train.py", line, "train_step"), *tail),
            }
        ],
    }


def test_frame_kinds():
    assert [
        f["kind"]
        for f in frames(
            (TORCH, 1, "a"),
            ("/job/x.py", 1, "b"),
            (PYDEVD, 1, "c"),
            (BOOT, 1, "d"),
            ("<frozen runpy>", 1, "e"),
            (THREADING, 1, "f"),
        )
    ] == ["library", "user", "internal", "internal", "internal", "library"]


def test_groups_largest_first_with_departure_and_labels():
    reduce_ = [(TORCH, 2801, "all_reduce"), (LOGGER, 81, "wrapper")]
    dumps = {r: dump(reduce_, 42) for r in (0, 2, 3)}
    dumps[1] = dump([(TORCH, 4000, "barrier"), (LOGGER, 81, "wrapper")], 57)
    groups = stackgroup.group(dumps)
    assert [g["ranks"] for g in groups] == [[0, 2, 3], [1]]
    assert groups[0]["label"] == "all_reduce \u2190 train_step (train.py:42)"
    assert groups[1]["label"] == "barrier \u2190 train_step (train.py:57)"
    assert groups[0]["departs_at"] is None
    odd = groups[1]
    assert odd["frames"][odd["departs_at"]]["line"] == 57  # the call site that differs, not the library frame
    assert [f["function"] for f in odd["frames"]] == ["barrier", "wrapper", "train_step", "<module>"]
    lines = stacktext.summary_lines({"groups": groups})
    assert lines[0] == "ranks 0,2-3: all_reduce \u2190 train_step (train.py:42)"
    assert lines[1].startswith(
        "rank 1: barrier \u2190 train_step (train.py:57)   <- departs from ranks 0,2-3 at "
        "train_step (train.py:57); they are at line 42"
    )


def test_debugger_frames_are_left_out_of_the_key():
    stopped = dump(
        [(THREADING, 320, "wait"), (PYDEVD, 2100, "_do_wait_suspend"), (PYDEVD, 2000, "do_wait_suspend")], 42
    )
    plain = dump([], 42)
    groups = stackgroup.group({0: stopped, 1: plain})
    assert [g["ranks"] for g in groups] == [[0, 1]]
    assert groups[0]["frames"][0]["function"] == "train_step" and groups[0]["debugger"] is True
    assert groups[0]["label"].endswith("[stopped in the debugger]")
    # every frame is still there in the rank's thread
    assert any(f["kind"] == "internal" for f in groups[0]["threads"][0]["frames"])


def test_rtdebug_threads_are_marked_and_left_out_of_the_text():
    d = dump([], 42)
    accept = {
        "id": "0x2",
        "current": False,
        "truncated": False,
        "frames": frames(
            ("/usr/lib/python3.11/socket.py", 294, "accept"),
            (PACKAGE_DIR + "rank/endpoint.py", 220, "_accept_loop"),
            (THREADING, 982, "run"),
        ),
    }
    worker = {
        "id": "0x3",
        "current": False,
        "truncated": False,
        "frames": frames(("/job/train.py", 10, "load"), (THREADING, 982, "run")),
    }
    d["threads"] = [accept, worker, *d["threads"]]
    g = stackgroup.group({0: d})[0]
    assert [(t["id"], t["main"], t["internal"]) for t in g["threads"]] == [
        ("0x2", False, True),
        ("0x3", False, False),
        ("0x00000001", True, False),
    ]
    text = stacktext.render({"session_id": "s", "taken_at": 0.0, "elapsed_s": 0.0, "groups": [g]}, threads=True)
    assert "rank 0 thread 0x3:" in text and "0x2" not in text


def test_rank_list_and_short_paths():
    assert stackgroup.rank_list([3, 0, 2, 4, 7]) == "0,2-4,7"
    assert stackgroup.ranks_word([5]) == "rank 5"
    assert stacktext.short_path(TORCH) == "torch/distributed/distributed_c10d.py"
    assert stacktext.short_path(THREADING) == "threading.py"


def test_render_names_unresponsive_and_exited_ranks():
    snap = {
        "session_id": "s",
        "taken_at": 0.0,
        "elapsed_s": 0.01,
        "groups": stackgroup.group({0: dump([], 42)}),
        "unresponsive": [1],
        "unresponsive_detail": [{"rank": 1, "pid": 9, "reason": "no answer within 2 s"}],
        "exited": [{"rank": 2, "state": "failed", "exit_code": 1}],
    }
    text = stacktext.render(snap)
    assert "session s: 2 ranks" in text
    assert "rank 1: unresponsive (no answer within 2 s)" in text
    assert "rank 2: failed (exit code 1)" in text
    assert "    > " not in text  # one group: nothing departs


MISMATCH_TEXT = (
    "Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint("
    "SequenceNumber=3, OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float, TensorDeviceTypes=TensorOptions("
    "dtype=float (default), device=cpu)), but Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=3, "
    "OpType=ALLREDUCE, TensorShape=[8], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float)).Collectives "
    "differ in the following aspects: \t Tensor Tensor shapes: 4vs 8"
)


def test_collective_mismatch_is_one_line():
    line = collectives.explain(RuntimeError(MISMATCH_TEXT))
    assert line == (
        "collective mismatch (--check-collectives): rank 0 called ALLREDUCE #3 [4] Float, "
        "rank 1 called ALLREDUCE #3 [8] Float"
    )
    other = MISMATCH_TEXT.replace(
        "SequenceNumber=3, OpType=ALLREDUCE, TensorShape=[8], TensorDtypes=Float, "
        "TensorDeviceTypes=TensorOptions(dtype=float)",
        "SequenceNumber=0OpType=GATHER",
    )
    assert collectives.explain(RuntimeError(other)).endswith(
        "rank 1 is at another collective (torch reports GATHER #0)"
    )
    assert collectives.explain(RuntimeError("something else")) is None
    assert collectives.explain(ValueError(MISMATCH_TEXT)) is None


def test_config_check_collectives_and_hang_report():
    cfg = RankConfig(session_id="s", check_collectives=True, hang_report_s=7.5)
    env = cfg.to_env()
    assert env["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    assert RankConfig.from_env(env) == cfg
    assert "TORCH_DISTRIBUTED_DEBUG" not in RankConfig(session_id="s").to_env()
    with pytest.raises(HarnessError, match="--hang-report must be >= 0") as e:
        RankConfig(session_id="s", hang_report_s=-1)
    assert e.value.exit_code == 2


def test_native_without_py_spy_is_one_line(tmp_path, monkeypatch, registry_dir):
    from rtdebug.commands import stacks
    from rtdebug.registry.entry import session_entry
    from rtdebug.registry.files import Registry
    from rtdebug.stacks.native import find_py_spy

    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # no py-spy beside it
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_py_spy() is None
    sid = "20261207-000000-abcd"  # a live job on this machine (this process): py-spy would run here
    entry = session_entry(sid, "torchrun", state="running", script="train.py", nproc_per_node=2,
                          host="127.0.0.1", port_base=1, ports=[])  # fmt: skip
    reg = Registry(registry_dir)
    reg.ensure()
    reg.write_new_session(entry)
    with pytest.raises(HarnessError, match=r"^--native needs py-spy: pip install 'rtdebug\[stacks\]'") as e:
        stacks.run(stacks.StacksOptions(native=True, session=sid))
    assert e.value.exit_code == 1


def test_a_rank_outside_the_script_says_what_the_harness_does():
    waiting = frames(
        (THREADING, 331, "wait"),
        (PYDEVD, 981, "block_until_configuration_done"),
        (PACKAGE_DIR + "rank/endpoint.py", 286, "wait_for_client"),
        (BOOT, 131, "serve_and_run"),
        ("<frozen runpy>", 198, "_run_module_as_main"),
    )
    shown, debugger = stackgroup.visible_frames(waiting)
    assert shown == waiting and debugger is False  # nothing of the user's: keep everything
    assert stackgroup.label(shown) == "wait \u2190 wait_for_client (endpoint.py:286) [rtdebug, outside the script]"


def test_every_rtdebug_subpackage_counts_as_rtdebug_not_user_code():
    """The frames of rtdebug's rank, launcher and stacks modules are rtdebug's own, wherever they live."""
    import rtdebug.launcher.agent
    import rtdebug.rank.bootstrap
    import rtdebug.rank.stacks.dump

    for mod in (rtdebug.rank.bootstrap, rtdebug.rank.stacks.dump, rtdebug.launcher.agent):
        assert stackgroup.frame_kind(mod.__file__) != "user", mod.__file__
    assert stackgroup.frame_kind(str(ROOT / "examples" / "hang.py")) == "user"


def test_the_fallback_signal_never_goes_to_a_process_that_no_longer_handles_it(tmp_path):
    """An exiting interpreter puts the default action (terminate) back for the dump signal; a `stacks` that
    signalled it then would kill a rank that was ending well. Only a process that catches it is signalled."""
    from rtdebug.stacks import collect

    handles = (
        f"import signal, time; signal.signal({contract.SIGNAL}, lambda *a: print('dumped', flush=True)); "
        "print('ready', flush=True); time.sleep(60)"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
             for code in (handles, "import time; print('ready', flush=True); time.sleep(60)")]  # fmt: skip
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        stacks = {"signal": contract.SIGNAL}
        entries = [
            {"rank": r, "pid": p.pid, "stacks": {**stacks, "file": contract.dump_file(r)}} for r, p in enumerate(procs)
        ]
        for e in entries:
            (tmp_path / contract.dump_file(e["rank"])).write_text("")
        unresponsive: dict[int, str] = {}
        pending = collect.signal_ranks(tmp_path, entries, unresponsive)
        assert [p.rank for p in pending] == [0] and procs[0].stdout is not None
        assert procs[0].stdout.readline() == "dumped\n"
        assert unresponsive == {1: "it no longer handles the stacks signal (it is exiting); not signalled"}
        assert procs[1].poll() is None  # alive: never sent a signal whose default would have ended it
    finally:
        for p in procs:
            p.kill()
            p.wait()
