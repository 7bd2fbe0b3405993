"""``stacks`` through ``connect`` without a network: the relay socket (a real unix socket, a real command run for
each request, a real second uid refused) and a node's ``stacks --json`` read as hostile input (a real
snapshot of this process's threads, then forged ones)."""

from __future__ import annotations

import faulthandler
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rtdebug.common.errors import HarnessError
from rtdebug.connect import remotesnap, stacksrelay
from rtdebug.connect.stacksrelay import RelayServer, StacksRequest
from rtdebug.stacks import group as stackgroup
from rtdebug.stacks import history
from rtdebug.stacks import text as stacktext

ECHO = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]  # the node's "rtdebug"


def run_local(argv: list[str], timeout: float) -> tuple[int, bytes, str]:
    p = subprocess.run(argv, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr.decode().strip()


@pytest.fixture
def sdir(tmp_path):
    d = tmp_path / ("d" * 150)  # longer than a socket address may be: bound through /proc/self/fd
    d.mkdir(mode=0o700)
    return d


def test_a_request_becomes_the_node_s_stacks_command_with_typed_options_only(sdir):
    server = RelayServer(sdir, "20261207-000000-abcd", ECHO, run_local)
    try:
        rc, out, err = stacksrelay.ask(sdir, StacksRequest("dp=0,tp=*", 2.5, True, 8), "node0")
        assert rc == 0 and err == ""
        assert json.loads(out) == ["stacks", "--json", "--session", "20261207-000000-abcd", "--timeout", "2.5",
                                   "--rank", "dp=0,tp=*", "--native", "--history", "8"]  # fmt: skip
        rc, out, _ = stacksrelay.ask(sdir, StacksRequest(), "node0")
        assert json.loads(out)[-2:] == ["--timeout", "3"]
    finally:
        server.close()
    assert not (sdir / stacksrelay.RELAY_SOCKET).exists()
    with pytest.raises(HarnessError, match="cannot ask this session's `rtdebug connect` to run stacks on node0"):
        stacksrelay.ask(sdir, StacksRequest(), "node0")


@pytest.mark.parametrize(
    "body",
    [
        {"op": "stacks", "rank": "--store=evil:1"},  # an option, never a rank
        {"op": "stacks", "rank": "0; rm -rf ~"},
        {"op": "stacks", "timeout": True},
        {"op": "stacks", "timeout": 1e9},
        {"op": "stacks", "history": 0},
        {"op": "stacks", "native": "yes"},
        {"op": "run", "argv": ["sh"]},
        [1, 2],
    ],
)
def test_a_forged_request_runs_nothing(sdir, body):
    ran: list[list[str]] = []
    server = RelayServer(sdir, "s1", ["rtdebug"], lambda argv, t: (ran.append(argv), (0, b"", ""))[1])
    try:
        import socket

        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            fd = os.open(sdir, os.O_RDONLY)
            s.connect(f"/proc/self/fd/{fd}/{stacksrelay.RELAY_SOCKET}")
            os.close(fd)
            s.sendall(json.dumps(body).encode() + b"\n")
            rc, _, err = stacksrelay._answer(stacksrelay._read_all(s, time.monotonic() + 30), "node0")
        assert rc == -1 and err == "not a stacks request this connect takes" and ran == []
    finally:
        server.close()


def test_the_relay_answers_its_own_user_only():
    """A second uid that is given a way to the socket (the directory and socket opened to it) gets nothing
    run: the relay checks the caller's uid itself (``SO_PEERCRED``), not only the file's mode."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a second uid")
    d = Path(tempfile.mkdtemp(prefix="rtdebug-relay-"))
    ran: list[list[str]] = []
    server = RelayServer(d, "s1", ECHO, lambda argv, t: (ran.append(argv), (0, b"ran", ""))[1])
    try:
        d.chmod(0o755)
        (d / stacksrelay.RELAY_SOCKET).chmod(0o777)
        code = "import socket, sys\ns = socket.socket(socket.AF_UNIX); s.settimeout(20); s.connect(sys.argv[1])\n"
        code += 'try:\n s.sendall(b\'{"op": "stacks"}\\n\'); print(repr(s.recv(100)))\n'
        code += "except OSError: print(repr(b''))"  # closed on it: sending may fail first
        other = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code,
             str(d / stacksrelay.RELAY_SOCKET)], capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert other.stdout.strip() == "b''" and ran == [], other.stdout + other.stderr
    finally:
        server.close()
        d.rmdir()


# -- the node's answer, read as hostile input ---------------------------------------------------------------


def real_snapshot() -> dict:
    """``stacks --json`` of two "ranks" that are this process (its real threads, as faulthandler writes them)."""
    with tempfile.TemporaryFile("w+") as f:
        faulthandler.dump_traceback(f, all_threads=True)
        f.seek(0)
        text = f.read()
    dump = {"threads": stackgroup.parse_dump(text), "main_id": None, "pid": os.getpid(), "complete": True}
    snap = stackgroup.snapshot("s1", 1.0e9, 0.0, {0: dump, 1: dict(dump)}, {2: "no answer within 3 s"}, {2: 4321}, [])
    snap.update(coords={}, fallback=[], stopped=None, verdict="rank 1 is in BARRIER #4 (hang.py:26)", culprit=1,
                collectives_from="record", flight_note=None)  # fmt: skip
    for g in snap["groups"]:
        g["collectives"] = [{"op": "BARRIER", "seq": 4, "state": "entered", "file": "hang.py", "line": 26, "rank": 1}]
    return json.loads(json.dumps(snap))


def test_a_real_snapshot_reads_back_whole():
    snap = real_snapshot()
    got = remotesnap.parse(json.dumps(snap).encode(), "s1", "node0")
    assert got["groups"] == snap["groups"] and got["unresponsive_detail"] == snap["unresponsive_detail"]
    assert got["verdict"] == snap["verdict"] and got["culprit"] == 1
    assert stacktext.render(got) == stacktext.render(snap)


@pytest.mark.parametrize(
    ("forge", "why"),
    [
        (lambda s: s.update(session_id="other"), "snapshot.session_id"),
        (lambda s: s["groups"][0].update(ranks=["0"]), "groups[0].ranks[0]"),
        (lambda s: s["groups"][0]["frames"][0].update(file=7), "groups[0].frames[0].file"),
        (lambda s: s["groups"][0]["frames"][0].update(kind="trusted"), "groups[0].frames[0].kind"),
        (lambda s: s["groups"][0]["threads"][0].update(frames={}), "groups[0].threads[0].frames"),
        (lambda s: s.update(unresponsive_detail=[{"rank": 2, "pid": "1", "reason": "x"}]), "unresponsive_detail[0]"),
        (lambda s: s.update(groups={"0": 1}), "groups"),
    ],
)
def test_a_forged_snapshot_is_refused_in_one_line(forge, why):
    snap = real_snapshot()
    forge(snap)
    with pytest.raises(HarnessError) as exc:
        remotesnap.parse(json.dumps(snap).encode(), "s1", "node0")
    assert exc.value.message.startswith(f"node0: `rtdebug stacks --json` printed a snapshot with a bad {why}")


def test_junk_around_a_snapshot_is_dropped_and_its_text_never_drives_the_terminal():
    snap = real_snapshot()
    snap["groups"][0]["label"] = "all_reduce \x1b]0;owned\x07"
    snap["culprit"] = "1"  # not an int: left out, not trusted
    snap["groups"][0]["departs_at"] = 10**9  # past the frames: no mark
    snap["groups"][0]["native"] = {"0": {"nested": "object"}, "x": "text"}
    snap.update(extra={"nested": [1]}, moving=True, note="x" * 5000)
    got = remotesnap.parse(json.dumps(snap).encode(), "s1", "node0")
    assert got["culprit"] is None and got["groups"][0]["departs_at"] is None and "native" not in got["groups"][0]
    assert got["moving"] is True and "extra" not in got and "note" not in got
    assert "\x1b" not in stacktext.render(got) and "\x07" not in stacktext.render(got)
    for raw in (b"", b"not json", b"[" * 100000, json.dumps([snap]).encode()):
        with pytest.raises(HarnessError, match="^node0: `rtdebug stacks --json` printed "):
            remotesnap.parse(raw, "s1", "node0")


def test_the_history_table_reads_back_with_its_rank_columns():
    flights = {
        r: {
            "entries": [
                {
                    "pg": "0",
                    "desc": "default_pg",
                    "seq": s,
                    "op": "allreduce",
                    "sizes": "[[4]]",
                    "dtypes": "Float",
                    "state": "completed" if s < 4 or r == 0 else "entered",
                    "p2p": False,
                }
                for s in range(1, 5)
            ]
        }  # fmt: skip
        for r in (0, 1)
    }
    hist = history.align(flights, 4)
    snap = dict(real_snapshot(), history=json.loads(json.dumps(hist)))
    got = remotesnap.parse(json.dumps(snap).encode(), "s1", "node0")
    assert history.render(got["history"]) == history.render(hist)


def test_a_moving_job_s_motion_reads_back_typed():
    snap = real_snapshot()
    snap.update(verdict=None, culprit=None, motion_line="the job is progressing: every rank advanced")
    snap["motion"] = {"state": "moving", "window_s": 0.25, "advanced": {"0": 312, "1": "x", "r": 3}, "how": "record",
                      "why": None}  # fmt: skip
    got = remotesnap.parse(json.dumps(snap).encode(), "s1", "node0")
    assert got["motion"] == {"state": "moving", "window_s": 0.25, "advanced": {"0": 312}, "how": "record", "why": None}
    assert got["motion_line"] == snap["motion_line"] and got["verdict"] is None and got["culprit"] is None


def test_native_through_connect_is_the_node_s_py_spy_not_this_machine_s(tmp_path, monkeypatch, capsys):
    """``rtdebug stacks --native`` for a connected session runs py-spy on the node: a laptop without py-spy
    asks the node all the same (``--native`` in the node's command), and the node's own refusal is said."""
    from rtdebug import cli
    from rtdebug.registry.entry import problem, session_entry
    from rtdebug.registry.files import Registry
    from rtdebug.stacks.native import find_py_spy

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no py-spy on this machine: none on PATH...
    monkeypatch.setattr(sys, "executable", str(tmp_path / "empty" / "python"))  # ...nor beside this Python
    assert find_py_spy() is None
    reg = Registry(tmp_path / "registry")
    reg.ensure()
    monkeypatch.setenv("RTDEBUG_REGISTRY_DIR", str(reg.root))
    sid = "20261207-000000-abcd"
    entry = session_entry(sid, "connected", state="running", script="hang.py", nproc_per_node=2, host="127.0.0.1",
                          port_base=1, ports=[], connect={"host": "node0", "remote_session": sid})  # fmt: skip
    assert problem(entry, "session") is None
    reg.write_new_session(entry)
    asked: list[list[str]] = []
    snap = real_snapshot()
    snap["session_id"] = sid

    def node(argv: list[str], timeout: float) -> tuple[int, bytes, str]:
        asked.append(argv)
        return 0, json.dumps(snap).encode(), ""

    server = RelayServer(reg.session_dir(sid), sid, ["rtdebug"], node)
    try:
        assert cli.main(["stacks", "--native", "--session", sid, "--json"]) == 0
        assert "--native" in asked[0] and json.loads(capsys.readouterr().out)["verdict"] == snap["verdict"]
    finally:
        server.close()
    refused = "rtdebug: error: --native needs py-spy: pip install 'rtdebug[stacks]' (or pip install py-spy)"
    server = RelayServer(reg.session_dir(sid), sid, ["rtdebug"], lambda argv, timeout: (1, b"", refused))
    try:
        assert cli.main(["stacks", "--native", "--session", sid]) == 1
    finally:
        server.close()
    assert capsys.readouterr().err == (
        "rtdebug: error: node0: `rtdebug stacks` failed: --native needs py-spy: pip install 'rtdebug[stacks]' "
        "(or pip install py-spy)\n"
    )
