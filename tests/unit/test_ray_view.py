"""The Ray view's decisions that need no cluster: addresses, and when it opens at all."""

from __future__ import annotations

import os
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


def test_only_entries_whose_pids_are_ours_are_judged_by_pid():
    """A laptop named as a cluster node is (containers and namespaces share hostnames too) must not judge,
    and so delete, that node's live entries by pids of its own: only the ``machine`` (boot id and pid
    namespace) says the entry's pids are this machine's."""
    from rtdebug.common.procinfo import machine_id, process_create_time

    here, dead_pid = machine_id(), 2**22 - 1
    assert here and ray_view.pids_are_ours(here)
    assert not ray_view.pids_are_ours(None) and not ray_view.pids_are_ours("")
    other = "00000000-0000-0000-0000-000000000000/pid:[1]"
    rank = {"node_id": "n1", "hostname": socket.gethostname(), "pid": dead_pid, "create_time": 1.0}
    assert ray_view.RayView._rank_live(dict(rank, machine=other), {"n1"})  # the node says: alive
    assert ray_view.RayView._rank_live(rank, {"n1"})  # an older entry, no machine: Ray's word only
    assert not ray_view.RayView._rank_live(dict(rank, machine=here), {"n1"})  # ours, and that pid is gone
    me = {"node_id": "n1", "pid": os.getpid(), "create_time": process_create_time(os.getpid()), "machine": here}
    assert ray_view.RayView._rank_live(me, {"n1"}) and not ray_view.RayView._rank_live(me, {"n2"})
    session = {"state": "running", "ray_job_id": "j1", "driver_hostname": socket.gethostname(),
               "launcher_pid": dead_pid, "launcher_create_time": 1.0}  # fmt: skip
    live = ray_view.RayView._session_live
    assert live(None, dict(session, driver_machine=other), {"j1"})  # type: ignore[arg-type]
    assert not live(None, dict(session, driver_machine=here), {"j1"})  # type: ignore[arg-type]
    assert not live(None, dict(session, driver_machine=other), {"j2"})  # type: ignore[arg-type]
