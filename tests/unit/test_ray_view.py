"""The Ray view's decisions that need no cluster: addresses, and when it opens at all."""

from __future__ import annotations

import socket

import pytest

from rtdebug.common.errors import HarnessError
from rtdebug.registry.entry import session_entry
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import reserve_session
from rtdebug.views import ray as ray_view
from rtdebug.views.api import ViewOptions


def test_split_address():
    assert ray_view.split_address("10.0.0.1:6379") == ("10.0.0.1", 6379)
    assert ray_view.split_address("[::1]:6379") == ("::1", 6379)
    for bad in ("auto", "10.0.0.1", "ray://h:10001x", ":6379"):
        with pytest.raises(HarnessError, match="expected the cluster's GCS address HOST:PORT"):
            ray_view.split_address(bad)


def test_explicit_unreachable_address_is_one_line():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(HarnessError) as e:
        ray_view.open_view(ViewOptions(ray_address=f"127.0.0.1:{port}"))
    assert e.value.message == (f"cannot reach the Ray cluster's GCS at 127.0.0.1:{port} (--ray-address / RAY_ADDRESS)")


def test_no_address_and_no_recorded_cluster_means_no_view(registry_dir):
    assert ray_view.open_view(ViewOptions()) is None


def test_recorded_addresses_come_from_live_local_runs_only(registry_dir):
    reg = Registry()
    reg.ensure()
    live = session_entry(
        "s-live",
        "run",
        script="t.py",
        nnodes="1",
        nproc_per_node=1,
        host="127.0.0.1",
        port_base=1,
        ports=[1],
        state="running",
        ray_address="10.0.0.1:6379",
    )
    reserve_session(reg, live)
    ended = dict(live, session_id="s-ended", state="exited", ports=[2], ray_address="10.0.0.2:6379")
    reserve_session(reg, ended)
    dead = dict(live, session_id="s-dead", launcher_pid=2**22 - 1, ports=[3], ray_address="10.0.0.3:6379")
    reserve_session(reg, dead)
    assert ray_view.recorded_addresses() == ["10.0.0.1:6379"]
