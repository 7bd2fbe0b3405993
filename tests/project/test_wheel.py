"""The wheel as a user gets it: built from this checkout, installed into a fresh venv outside the repository.

An editable install finds every module in the checkout, so a subpackage left out of the wheel, or a
module path written as a string that no longer names a module (torchrun's ``-m`` target, the Ray
callback in ``RAY_TRAIN_CALLBACKS``, ``PYTHONBREAKPOINT``, the views' backends, the registry schema
file), would pass every other test. Here, from a working directory outside the repository: a real
2-rank torchrun job, ``ps``, and ``rtdebug run`` with a real DAP client stopping at a breakpoint.

The fresh venv gets the wheel with pip; its dependencies (torch, debugpy, psutil) come from the test
venv through a path line in a ``.pth`` file, which does not run that venv's editable-install hooks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from support.dap import DAPClient
from support.jobs import wait_ranks
from support.paths import ROOT, marker_line

pytestmark = pytest.mark.e2e
SCRIPT = textwrap.dedent("""
    import os
    import rtdebug

    world = int(os.environ.get("WORLD_SIZE", "1"))
    value = 40 + world  # BREAKPOINT: wheel
    print(f"value {value} from {rtdebug.__file__}", flush=True)
""")


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, f"{cmd}: {r.stdout[-2000:]}{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("wheel")
    src = d / "src"  # what the wheel is built from, without the checkout's own build/ (stale after a rename)
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "harness", src / "harness", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(d), str(src)])
    (wheel,) = d.glob("rtdebug-*.whl")
    venv = d / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    py = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)])
    site = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
    Path(site, "rtdebug_test_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv


def _env(registry: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return dict(env, RTDEBUG_REGISTRY_DIR=str(registry), PYTHONUNBUFFERED="1")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT / "harness").with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_wheel_holds_every_subpackage_and_data_file(wheel_venv, tmp_path):
    code = (
        "import json, pkgutil, rtdebug, importlib.resources as r\n"
        "mods = [m.name for m in pkgutil.walk_packages(rtdebug.__path__, 'rtdebug.')]\n"
        "schema = r.files('rtdebug.registry').joinpath('registry.schema.json').is_file()\n"
        "print(json.dumps([rtdebug.__file__, mods, schema]))"
    )
    out = _run([str(wheel_venv / "bin" / "python"), "-c", code], cwd=tmp_path).stdout
    where, mods, schema = json.loads(out)
    assert where.startswith(str(wheel_venv)), where  # the wheel's copy, not the checkout
    here = {_module(p) for p in (ROOT / "harness" / "rtdebug").rglob("*.py")} - {"rtdebug"}
    assert set(mods) == here
    assert schema


def test_torchrun_job_and_a_dap_stop_from_the_installed_wheel(wheel_venv, tmp_path, port_base):
    work, registry = tmp_path / "work", tmp_path / "registry"
    work.mkdir()
    script = work / "job.py"
    script.write_text(SCRIPT)
    exe = str(wheel_venv / "bin" / "rtdebug")
    r = _run(
        [exe, "torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", "job.py"],
        cwd=work,
        env=_env(registry),
    )
    assert r.stdout.count("value 42 from " + str(wheel_venv)) == 2, r.stdout
    [ended] = json.loads(_run([exe, "ps", "--all", "--json"], cwd=work, env=_env(registry)).stdout)["ended"]
    assert ended["state"] == "exited" and [r["state"] for r in ended["ranks"]] == ["exited", "exited"]
    job = subprocess.Popen(
        [exe, "run", "--port", str(port_base), "--wait", "job.py"],
        cwd=work,
        env=_env(registry),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert job.stdout is not None
        lines = iter(job.stdout.readline, "")
        sid = next(m.group(1) for line in lines if (m := re.search(r"session (\S+) starting", line)))
        wait_ranks(registry, sid, 1)
        line = marker_line(script, "wheel")
        c = DAPClient("127.0.0.1", port_base)
        c.attach({str(script): [line]})
        stopped = c.wait_stopped(120)
        frame = c.top_frame(stopped["threadId"])
        assert frame["line"] == line and c.evaluate("world", frame["id"]) == "1"
        assert str(wheel_venv) in c.evaluate("rtdebug.__file__", frame["id"])
        c.continue_(stopped["threadId"])
        c.disconnect()
        out, _ = job.communicate(timeout=120)
        assert job.returncode == 0 and "value 41 from " + str(wheel_venv) in out, out
    finally:
        job.kill()
