"""The bad-input table: one line on stderr, the right exit code, nothing left behind."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess

import pytest

from support.jobs import rtdebug, wait_ranks
from support.paths import EXAMPLES, PY, ROOT, SCRIPTS
from support.ports import port_free

pytestmark = pytest.mark.e2e


def one_line_error(r: subprocess.CompletedProcess, code: int, text: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert any(text in line for line in lines), r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def no_sessions(registry_dir) -> None:
    live = json.loads(rtdebug("ps", "--json").stdout)["sessions"]
    assert live == []


@pytest.mark.parametrize("cmd", [["run"], ["torchrun", "--nproc-per-node", "2"]])
def test_missing_script(cmd, registry_dir):
    r = rtdebug(*cmd, "no_such_script.py")
    one_line_error(r, 2, "rtdebug: error: script not found: no_such_script.py")
    no_sessions(registry_dir)


def test_unreadable_script(tmp_path, registry_dir):
    p = tmp_path / "secret.py"
    p.write_text("print(1)")
    p.chmod(0)
    cmd = [PY, "-m", "rtdebug", "run", str(p)]
    if os.geteuid() == 0:  # root reads anything: drop the capabilities that let it
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv")
        caps = "-dac_override,-dac_read_search"
        cmd = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", *cmd]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    one_line_error(r, 2, f"rtdebug: error: script not readable: {p}")
    no_sessions(registry_dir)


def test_unknown_harness_option(registry_dir):
    r = rtdebug("run", "--no-such-flag", "x.py")
    one_line_error(r, 2, "unrecognized arguments: --no-such-flag")


@pytest.mark.parametrize(
    "argv, text",
    [
        (["run", "--bogus", "x.py"], "rtdebug: error: unrecognized arguments: --bogus (see 'rtdebug run --help')"),
        (
            ["torchrun", "--nproc-per-node", "2", "--pg-timeout", "10", "--bogus", "x.py"],
            "(see 'rtdebug torchrun --help')",
        ),
        (["torchrun", "--nproc-per-node"], "rtdebug: error: argument --nproc-per-node/--nproc_per_node: expected one"),
        (["ps", "--bogus"], "rtdebug: error: unrecognized arguments: --bogus (see 'rtdebug ps --help')"),
        (["attach"], "rtdebug: error: the following arguments are required: --rank (see 'rtdebug attach --help')"),
        (["bogus"], "rtdebug: error: argument COMMAND: invalid choice: 'bogus'"),
        ([], "rtdebug: error: the following arguments are required: COMMAND (see 'rtdebug --help')"),
    ],
)
def test_a_usage_mistake_is_one_line_never_a_usage_dump(argv, text, registry_dir):
    r = rtdebug(*argv)
    one_line_error(r, 2, text)
    assert len(r.stderr.splitlines()) == 1 and "usage:" not in r.stderr, r.stderr


def test_port_in_use_names_holder(registry_dir, port_base):
    with socket.socket() as s:
        s.bind(("127.0.0.1", port_base + 1))
        s.listen()
        r = rtdebug(
            "torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", str(EXAMPLES / "plain_ddp.py")
        )
    one_line_error(r, 1, f"debug port {port_base + 1} is already in use by python")
    assert f"pid {os.getpid()}" in r.stderr and "--debug-port-base" in r.stderr
    assert port_free(port_base)
    no_sessions(registry_dir)


def test_port_base_beyond_65535(registry_dir):
    r = rtdebug("torchrun", "--debug-port-base", "65535", "--nproc-per-node", "2", str(EXAMPLES / "plain_ddp.py"))
    one_line_error(r, 2, "--debug-port-base 65535 + world size 2 goes beyond port 65535")
    no_sessions(registry_dir)


@pytest.mark.parametrize("wait", ["0,x", "3", "2-1"])
def test_invalid_wait_list(wait, registry_dir):
    r = rtdebug("torchrun", "--wait", wait, "--nproc-per-node", "2", str(EXAMPLES / "plain_ddp.py"))
    one_line_error(r, 2, f"invalid --wait value {wait!r}")
    no_sessions(registry_dir)


def test_torchrun_argument_error_passes_through(registry_dir):
    r = rtdebug("torchrun", "--nnodes", "x:y:z", "--nproc-per-node", "2", str(EXAMPLES / "plain_ddp.py"))
    one_line_error(r, 2, "argument --nnodes: nnodes=x:y:z is not in")
    r = rtdebug("torchrun", "--max-restarts", "many", str(EXAMPLES / "plain_ddp.py"))
    one_line_error(r, 2, "argument --max-restarts/--max_restarts: invalid int value: 'many'")


def test_v2_disabled_in_environment(registry_dir):
    r = rtdebug("run", str(EXAMPLES / "local_linear.py"), env={"RAY_TRAIN_V2_ENABLED": "0"})
    one_line_error(r, 2, "RAY_TRAIN_V2_ENABLED=0 is set, but Ray Train local mode needs Ray Train V2")
    no_sessions(registry_dir)


def test_script_that_sets_v2_off(registry_dir, port_base):
    r = rtdebug("run", "--port", str(port_base), str(SCRIPTS / "sets_v2_off.py"))
    one_line_error(r, 1, "the script set RAY_TRAIN_V2_ENABLED=0, but Ray Train local mode")
    assert port_free(port_base)
    no_sessions(registry_dir)


def test_ray_data_with_two_ranks_in_rays_own_local_mode(job, registry_dir, port_base):
    """Ray's own local mode refuses datasets= on two ranks (rtdebug's default shards them: test_raylocal_data)."""
    script = str(SCRIPTS / "ray_data_two_ranks.py")
    j = job("torchrun", "--ray-local-mode=ray", "--debug-port-base", str(port_base), "--nproc-per-node", "2", script)
    assert j.wait(180) != 0
    out = j.output()
    assert (
        "Ray Data (datasets=) is not supported in Ray's own local mode with more than one rank; "
        "drop --ray-local-mode=ray (rtdebug's default shards it), or load data with a torch DataLoader + "
        "DistributedSampler" in out
    )
    assert "AssertionError" not in out


def test_attach_errors(job, registry_dir, port_base):
    r = rtdebug("attach", "--rank", "0")
    one_line_error(r, 1, "no live rtdebug session")
    r = rtdebug("attach", "--rank", "0", "--session", "nope")
    one_line_error(r, 1, "no live session 'nope'")
    j = job(
        "torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", str(SCRIPTS / "rank1_exits_early.py")
    )
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 1, states=("exited",))
    one_line_error(
        rtdebug("attach", "--rank", "5", "--session", sid), 2, f"rank 5 is out of range: session {sid} has world size 2"
    )
    one_line_error(
        rtdebug("attach", "--rank", "1", "--session", sid), 1, f"rank 1 of session {sid} has exited (exit code 0)"
    )
    r = rtdebug("attach", "--rank", "0", "--session", sid, "--json")
    assert r.returncode == 0, r.stderr
    cfg = json.loads(r.stdout)
    assert cfg["port"] == port_base and cfg["configuration"]["connect"] == {"host": "127.0.0.1", "port": port_base}
    assert cfg["configuration"]["type"] == "debugpy"


def test_overlapping_sessions_at_once(registry_dir, port_base, tmp_path):
    """Two launchers racing for the same ports: exactly one gets them, the other a clear error."""
    script = str(SCRIPTS / "rank1_exits_early.py")
    env = dict(os.environ, RTDEBUG_REGISTRY_DIR=str(registry_dir))
    procs = [
        subprocess.Popen(
            [
                PY,
                "-m",
                "rtdebug",
                "torchrun",
                "--debug-port-base",
                str(port_base),
                "--nproc-per-node",
                "2",
                script,
                "30",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        outs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            p.kill()
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], (codes, outs)
    loser = next(o for p, o in zip(procs, outs, strict=True) if p.returncode == 1)
    assert "Traceback" not in loser[1]
    assert ("is reserved by session" in loser[1]) or ("is already in use by" in loser[1]), loser[1]
