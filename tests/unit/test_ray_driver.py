"""What `rtdebug run` arms in the driver for Ray Train workers (no Ray needed)."""

from __future__ import annotations

import pytest

from rtdebug.common.config import RankConfig
from rtdebug.common.errors import HarnessError
from rtdebug.launcher import ray_driver


def _cfg(**kw) -> RankConfig:
    return RankConfig(session_id="s1", port_base=6000, **kw)


def test_driver_env_names_the_callback_after_the_users_and_sets_the_worker_base():
    env = ray_driver.driver_env(
        _cfg(), "train.py", 6000, None, "10.0.0.1:6379", env={"RAY_TRAIN_CALLBACKS": "my.mod.Cb"}
    )
    assert env["RAY_TRAIN_CALLBACKS"] == "my.mod.Cb,rtdebug.rank.ray_worker.RtdebugCallback"
    assert env["RTDEBUG_WORKER_PORT_BASE"] == "6001"  # the port after the driver's
    assert env["RAY_ADDRESS"] == "10.0.0.1:6379"
    assert env["RTDEBUG_SESSION"] == "s1" and env["RTDEBUG_SCRIPT"] == "train.py"
    assert "RTDEBUG_PORT_BASE" not in env  # the driver's own port is not the workers' base


def test_driver_env_keeps_an_existing_entry_once_and_takes_an_explicit_base():
    env = ray_driver.driver_env(
        _cfg(), "t.py", 6000, 7000, None, env={"RAY_TRAIN_CALLBACKS": "rtdebug.rank.ray_worker.RtdebugCallback"}
    )
    assert env["RAY_TRAIN_CALLBACKS"] == "rtdebug.rank.ray_worker.RtdebugCallback"
    assert env["RTDEBUG_WORKER_PORT_BASE"] == "7000" and "RAY_ADDRESS" not in env


def test_worker_port_base_range():
    with pytest.raises(HarnessError, match="--debug-port-base 70000 must be within 1-65535"):
        ray_driver.worker_port_base(6000, 70000)


def test_session_fields_only_for_a_gcs_address():
    assert ray_driver.session_fields({"RAY_ADDRESS": "10.0.0.1:6379"}) == {"ray_address": "10.0.0.1:6379"}
    assert ray_driver.session_fields({"RAY_ADDRESS": "auto"}) == {}
    assert ray_driver.session_fields({"RAY_ADDRESS": "ray://h:10001"}) == {}
    assert ray_driver.session_fields({}) == {}
