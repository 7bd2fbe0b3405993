"""rtdebug.common.imports (post-import hooks) and what a rank's start path imports.

Every module the rank imports before the user's script runs is on the launch's critical path
(issue 13: launch -> first step within 3 % of plain torchrun), so psutil and filelock must stay off it.
"""

from __future__ import annotations

import subprocess
import sys

from rtdebug.common.imports import when_imported


def _imported(module: str, names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` a fresh interpreter has in sys.modules after importing ``module``."""
    code = f"import sys, {module}; print(sorted(m for m in {names!r} if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return eval(r.stdout)


def test_rank_and_launcher_start_paths_import_no_psutil_filelock_or_debugpy():
    heavy = ("psutil", "filelock", "debugpy", "torch", "importlib.abc")
    assert _imported("rtdebug.rank.bootstrap", heavy) == []
    # the launcher (`rtdebug torchrun`) needs neither the rank's modules nor debugpy
    assert _imported("rtdebug.cli", (*heavy[1:], "rtdebug.rank.bootstrap", "rtdebug.rank.endpoint")) == []
    # and `ps`/`attach`/`stop` never load the launcher: the shell starts it lazily (rtdebug.launcher.start)
    assert _imported("rtdebug.cli", ("rtdebug.launcher.start", "rtdebug.launcher.torchrun")) == []
    assert _imported("rtdebug", ("rtdebug.rank.api", "rtdebug.rank.runtime")) == []  # breakpoint: on first use


def test_torchrun_launcher_loads_no_views_psutil_or_hang_watch_before_the_fork():
    """What `rtdebug torchrun` imports before it forks the agent is on the way to every rank's first step:
    the views (psutil, through their teardown) are for ps/attach/stop, the hang watch loads after the fork."""
    late = ("psutil", "rtdebug.views.api", "rtdebug.launcher.hangwatch", "rtdebug.stacks.collect")
    assert _imported("rtdebug.commands.torchrun, rtdebug.launcher.start", late) == []


def test_torchrun_parser_freezes_what_torch_loaded_and_leaves_the_gc_on():
    """The launcher's heap with torch in it is frozen once parsed (no full collection walks it again)."""
    code = (
        "import argparse, gc, sys; from rtdebug.commands.torchrun import TorchrunOptions; "
        "TorchrunOptions.from_args(argparse.Namespace(rest=['--nproc-per-node', '2', 'x.py'])); "
        "print(gc.isenabled(), gc.get_freeze_count() > 10000, 'torch' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["True", "True", "True"]


def test_hook_runs_after_the_module_executes_and_at_once_if_imported(tmp_path, monkeypatch):
    (tmp_path / "rtd_hooked_mod.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported("rtd_hooked_mod", lambda m: seen.append(m.VALUE + 1))
    assert seen == []
    import rtd_hooked_mod  # noqa: F401

    assert seen == [42]
    when_imported("rtd_hooked_mod", lambda m: seen.append(m.VALUE))
    assert seen == [42, 41]
    sys.modules.pop("rtd_hooked_mod", None)
