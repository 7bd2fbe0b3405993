"""Shared fixtures: an isolated registry, a free port range, and real jobs that never leak.

Fixtures only; the helpers the tests share live in ``tests/support/`` (imported as ``support.<module>``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.adoptjobs import PlainJob, can_ptrace
from support.jobs import Jobs
from support.ports import free_port_base


@pytest.fixture(autouse=True)
def own_config_dir(tmp_path_factory, monkeypatch) -> Path:
    """The per-user default job secret lives under ``$XDG_CONFIG_HOME/rtdebug`` (``rtdebug.registry.signing``):
    every test, and every process it starts, gets a config directory of its own, never the developer's."""
    d = tmp_path_factory.mktemp("config")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(d))
    return d


@pytest.fixture(autouse=True)
def own_ray_results(tmp_path_factory, monkeypatch) -> Path:
    """Ray Train runs keep checkpoints under ``RunConfig(storage_path)`` (local mode too, under rtdebug): the
    test scripts read ``RTDEBUG_TEST_STORAGE`` for it, a directory of each test's own, never ~/ray_results."""
    d = tmp_path_factory.mktemp("ray_results")
    monkeypatch.setenv("RTDEBUG_TEST_STORAGE", str(d))
    return d


@pytest.fixture(autouse=True)
def ranks_stop_alone(monkeypatch) -> None:
    """All-stop is on by default (``rtdebug.rank.allstop``): the suite's jobs run with it off
    (``RTDEBUG_ALL_STOP=0``), so a test that stops one rank sees only that rank stop. A test of all-stop as a
    user gets it removes the variable (``monkeypatch.delenv("RTDEBUG_ALL_STOP")``; ``tests/e2e/test_allstop.py``)."""
    monkeypatch.setenv("RTDEBUG_ALL_STOP", "0")


@pytest.fixture
def registry_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "registry"
    monkeypatch.setenv("RTDEBUG_REGISTRY_DIR", str(d))
    return d


@pytest.fixture
def port_base() -> int:
    """A base with 16 free ports after it, away from the default 5678 that a developer may use."""
    return free_port_base(16)


@pytest.fixture
def job(tmp_path, registry_dir):
    """Factory for real jobs (``support.jobs.Job``); every one is killed (with its tree) at the end of the test."""
    jobs = Jobs(tmp_path, registry_dir)
    yield jobs.start
    jobs.kill_all()


@pytest.fixture
def plain(tmp_path, registry_dir):
    """Factory for torchrun jobs started without rtdebug (``support.adoptjobs.PlainJob``), for ``rtdebug adopt``;
    every one is killed with its tree at the end. Skips where this machine cannot ptrace."""
    if (why := can_ptrace()) is not None:
        pytest.skip(why)
    started: list[PlainJob] = []

    def start(tmp: Path | None = None, **kw) -> PlainJob:
        j = PlainJob(tmp or tmp_path, **kw)
        started.append(j)
        return j

    yield start
    for j in started:
        j.kill()
