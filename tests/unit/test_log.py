"""Opt-in logs (rtdebug.common.log): nothing unless asked; with RTDEBUG_LOG_DIR, each swallowed exception
leaves one line (and its traceback at debug) in the process's own 0600 file, never through a link."""

from __future__ import annotations

import os
import subprocess
import sys

from support.paths import ROOT

PROG = """
from rtdebug.common import log
try:
    raise ValueError("the store went away\\nsecond line")
except Exception:
    log.swallowed("stacks.jobwide: a store that went away is retried")
log.info("plain info")
log.debug("plain debug")
print("done")
"""


def run(tmp_path, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("RTDEBUG_LOG")}
    e.update(env, PYTHONPATH=str(ROOT / "harness"))
    e.pop("RANK", None)
    return subprocess.run([sys.executable, "-c", PROG], capture_output=True, text=True, env=e, cwd=tmp_path, timeout=60)


def test_nothing_is_written_unless_asked(tmp_path):
    r = run(tmp_path)
    assert r.stdout == "done\n" and r.stderr == "" and list(tmp_path.iterdir()) == []


def test_a_log_dir_gets_one_private_file_per_process_with_each_swallowed_exception(tmp_path):
    d = tmp_path / "logs"
    r = run(tmp_path, RTDEBUG_LOG_DIR=str(d))
    assert r.returncode == 0 and r.stderr == ""
    (f,) = d.iterdir()
    assert f.name.startswith("rtdebug-rtdebug-") and f.stat().st_mode & 0o777 == 0o600
    assert d.stat().st_mode & 0o777 == 0o700
    text = f.read_text()
    assert "info: stacks.jobwide: a store that went away is retried (ValueError: the store went away)" in text
    assert "plain info" in text and "plain debug" not in text and "Traceback" not in text


def test_debug_adds_tracebacks_and_without_a_dir_goes_to_stderr(tmp_path):
    r = run(tmp_path, RTDEBUG_LOG="debug")
    assert "plain debug" in r.stderr and "Traceback (most recent call last)" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_planted_symlink_is_never_written_through(tmp_path):
    d = tmp_path / "logs"
    d.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    r = run(tmp_path, RTDEBUG_LOG_DIR=str(d))  # learn the name this pid would use: can't; plant all pids
    assert r.returncode == 0
    for p in d.iterdir():
        p.unlink()
    # the next process's name is unknown in advance, so plant a link at every name it could take
    for pid in range(max(os.getpid() - 50, 1), os.getpid() + 2000):
        (d / f"rtdebug-rtdebug-{pid}.log").symlink_to(victim)
    r = run(tmp_path, RTDEBUG_LOG_DIR=str(d))
    assert r.returncode == 0 and r.stdout == "done\n" and victim.read_text() == "precious"
