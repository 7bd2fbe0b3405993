"""Ray Data shards for any number of ranks (runs in each rank, at ``fit()``, on every rank together).

On a cluster, ``DataConfig.configure`` gives each of n workers ``ds.streaming_split(n, equal=True,
locality_hints=...)[i]`` for the datasets it splits (``datasets_to_split``, default ``"all"``) and
``ds.iterator()`` of the whole dataset for the others. Ray 2.60's local mode refuses datasets when the
world is larger than one. ``shard_datasets`` gives every rank what its worker would get on the cluster,
from the same code: rank 0 calls the trainer's own ``DataConfig.configure`` (a user's subclass included)
once per dataset, as Ray's ``DatasetManager`` does, and hands each rank its iterator.

Mechanism: one Ray instance the ranks share. Rank 0's Ray instance is the job's (the one
``ray.data.range`` at the script's top level already auto-started in it, or a head started here on
loopback in a temp dir of its own when the datasets are callables and no Ray runs yet); its GCS address is
broadcast through the ranks' meetings (the job's c10d store); every other rank leaves the Ray instance it
may have auto-started and joins rank 0's as a driver (``ray.init(address=...)``). The per-rank iterators
(``StreamSplitDataIterator``: the split coordinator actor's handle and the rank's index) are pickled
with Ray's cloudpickle and broadcast; rank 0 keeps all of them, so the coordinator lives until
``close()``. The shares are then Ray's own: in every epoch disjoint, equal (``equal=True``), their union
the whole dataset, streamed in blocks through one ``SplitCoordinator`` (which blocks a rank gets may change
from one epoch to the next, as on a cluster), so the object store (capped by ``object_store_memory`` where
rank 0's instance was started) bounds the memory for a dataset larger than RAM, and every block is read and
transformed once.

Why not one Ray instance per rank, each reading the whole dataset and keeping its own share: a
``streaming_split`` hands blocks to whichever split asks first, so n independent instances would not give
disjoint shares; a deterministic share would need ``preserve_order`` and the row count up front (a full
pass for a ``filter``), and every rank would read and transform every block (n times the cluster's
work, and n object stores). Measured (``bench/raydata_startup.py``, ``bench/results/2026-12-06-raydata-
startup.md``, 2 ranks on a loaded 2-CPU machine): on top of the instance the script's ``ray.data`` line
auto-starts in every rank (~10 s, as under Ray's own local mode), sharding costs rank 0 2.5 s and each
other rank 3.0 s (leave its own instance, join rank 0's); with callables for datasets only rank 0 starts
one, and launch to first batch is 14.5 s per rank against Ray's own 17 s for one rank. A 24 GiB dataset
(more than the machine's RAM) streamed with the object store capped at 256 MiB peaked at 2.6 GiB PSS for
the whole job (1.8 GiB for a 1 GiB dataset).

Known limits: a non-zero rank's own Ray instance (auto-started by its copy of the script) is shut down
at ``fit()``: Ray objects it made before ``fit()`` are gone (its datasets are replaced by rank 0's).
A multi-node job needs a Ray node on every host (a driver cannot join another host's instance without
one): ``shard_datasets`` refuses it in one line. With one rank the datasets stay as Ray's local mode
gives them (the whole ``Dataset``), and nothing is started here.

``close()`` is collective too: the joined ranks leave first, then rank 0 stops the executors and, if it
started the head, shuts it down and removes its temp dir. The head's processes share the rank's fate
(Ray's own reaper and parent-death signal), so a killed rank leaves nothing running.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rtdebug.common.errors import HarnessError

MULTI_NODE_MESSAGE = (
    "Ray Data (datasets=) in a multi-node torchrun job needs a Ray cluster (a Ray node on every host); "
    "run it on one node, or with ScalingConfig(num_workers=N) on a Ray cluster"
)


AUTH_MODE_VAR = "RAY_AUTH_MODE"


class ShardExchange(Protocol):
    """What the ranks exchange to share Ray Data: rank 0's head address and each rank's iterators, the
    first error, and the barriers of ``close()`` (``controller.DataMeetings`` gives them, over ``sync``)."""

    def broadcast(self, obj: Any, src: int = 0) -> Any: ...

    def barrier(self) -> None: ...


@dataclass
class Shared:
    """The Ray instance this rank uses for the job's datasets, and what ``close()`` must undo."""

    rank: int
    exchange: ShardExchange
    address: str
    started_head: bool = False  # rank 0 started the head here (else it was the script's own instance)
    joined: bool = False  # a non-zero rank connected to rank 0's head
    temp_dir: str | None = None
    keep: list[dict[str, Any]] = field(default_factory=list)  # rank 0: every rank's iterators
    watchdog: Any = None  # rank 0, a head started here: its Popen (see _watch)


_shared: Shared | None = None
_script_watchdogs: dict[str, Any] = {}  # rank 0's own (the script's) instance: one watchdog each, for life

# The watchdog: a tiny process in a session of its own (Ray's reaper kills rank 0's process group) that
# reads its stdin, a pipe from rank 0, until EOF: rank 0 closed it, or rank 0 is gone however it died.
# It then SIGKILLs the Ray processes it was given that still run (each checked by its start time, so a
# reused pid is never hit) and removes the head's temp dir, if rank 0 made one. Without it, Ray's
# DashboardAgent and RuntimeEnvAgent outlive a SIGKILLed driver by about 60 s (measured with plain Ray
# 2.60: they wait for their GCS to come back).
WATCHDOG = r"""
import os, signal, sys
def start(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None
pids = [tuple(map(int, a.split(":"))) for a in sys.argv[2:]]
while sys.stdin.buffer.read(65536):
    pass
for pid, st in pids:
    if start(pid) == st:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
if sys.argv[1] != "-":
    import shutil
    shutil.rmtree(sys.argv[1], ignore_errors=True)
"""


def datasets_to_split(names: Iterable[str], data_config: Any) -> set[str]:
    """The names ``DataConfig`` splits across workers (``datasets_to_split``: ``"all"`` or a list)."""
    spec = "all" if data_config is None else getattr(data_config, "_datasets_to_split", "all")
    names = set(names)
    return names if spec == "all" else names & set(spec)


def resolve(datasets: dict[str, Any] | None) -> dict[str, Any]:
    """The trainer's datasets with callables called, as Ray's controllers do."""
    return {k: v() if callable(v) else v for k, v in (datasets or {}).items()}


def shard_datasets(
    datasets: dict[str, Any] | None,
    data_config: Any,
    world_size: int,
    rank: int,
    exchange: ShardExchange,
    *,
    local_world_size: int | None = None,
) -> dict[str, Any]:
    """This rank's dataset shards (name -> ``DataIterator``), collectively on every rank.

    With one rank (or no datasets) the datasets are returned as Ray's local mode gives them."""
    if world_size <= 1:
        return resolve(datasets)
    if not datasets:
        return {}
    if local_world_size is None:
        local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    if local_world_size != world_size:
        raise HarnessError(MULTI_NODE_MESSAGE)
    global _shared
    if _shared is not None:
        raise HarnessError("Ray Data shards were already made in this process; close() them first")
    if rank == 0:
        shared, error = _agree(exchange, _start_or_use_head, rank)
    else:
        shared, error = _agree(exchange, None, rank)
    error = _first_error(exchange, world_size, rank, error)
    if error:  # every rank raises it (it was agreed): what they made ends here, close() has nothing to do
        _abort(shared, exchange)
        raise HarnessError(error)
    assert shared is not None
    _shared = shared
    if rank == 0:
        mine, error = _hand_out(exchange, lambda: _configure(resolve(datasets), data_config, world_size, shared))
    else:
        mine, error = _hand_out(exchange, None)
    error = _first_error(exchange, world_size, rank, error)
    if error:
        _shared = None
        _abort(shared, exchange)
        raise HarnessError(error)
    return mine


def close() -> None:
    """End what ``shard_datasets`` started (on every rank; the joined ranks leave before the head ends)."""
    global _shared
    shared, _shared = _shared, None
    if shared is None:
        return
    import ray

    try:
        if shared.joined:
            ray.shutdown()
            shared.joined = False
        shared.exchange.barrier()
    except Exception:  # a peer that died: the head still ends below
        pass
    finally:
        _end(shared)


def _abort(shared: Shared | None, exchange: ShardExchange) -> None:
    """close()'s order on an error every rank has agreed on, then one more meeting: no rank raises (and
    exits, which makes torchrun kill the others) before rank 0 has ended its head."""
    import ray

    with contextlib.suppress(Exception):
        if shared is not None and shared.joined:
            ray.shutdown()
            shared.joined = False
        exchange.barrier()
    _end(shared)
    with contextlib.suppress(Exception):
        exchange.barrier()


def _end(shared: Shared | None) -> None:
    """This rank's part of the teardown, with no collective: a joined rank leaves; rank 0 stops the split
    coordinators' executors and the head it started."""
    if shared is None:
        return
    import ray

    if shared.joined:
        with contextlib.suppress(Exception):
            ray.shutdown()
    if shared.rank == 0:
        _stop_executors(shared.keep)
        shared.keep.clear()
        if shared.started_head:
            ray.shutdown()
        _release(shared.watchdog)
        shared.watchdog = None
        if shared.temp_dir:
            shutil.rmtree(shared.temp_dir, ignore_errors=True)
            atexit.unregister(_at_exit)


def _agree(exchange: ShardExchange, start: Callable[[int, ShardExchange], Shared] | None, rank: int) -> tuple:
    """Rank 0 starts (or uses) the head and broadcasts its address or its error; the others join it."""
    shared: Shared | None = None
    message: str | None = None
    if start is not None:
        try:
            shared = start(rank, exchange)
        except Exception as e:  # every rank must hear of it, or they wait in broadcast forever
            message = f"could not start the Ray instance for the ranks' datasets: {e}"
    auth = os.environ.get(AUTH_MODE_VAR)  # Ray sets it in the process that starts a head
    address, auth, message = exchange.broadcast((shared.address if shared else None, auth, message), src=0)
    if rank == 0 or message:
        return shared, message
    try:
        return _join(rank, exchange, address, auth), None
    except Exception as e:
        return None, f"rank {rank} could not join rank 0's Ray instance at {address}: {e}"


def _first_error(exchange: ShardExchange, world_size: int, rank: int, mine: str | None) -> str | None:
    """The first rank's error, on every rank: a rank that failed alone would leave its peers waiting in the
    next meeting (one broadcast per rank, at start-up only)."""
    first = None
    for src in range(world_size):
        theirs = exchange.broadcast(mine if rank == src else None, src=src)
        first = first or theirs
    return first


def _start_or_use_head(rank: int, exchange: ShardExchange) -> Shared:
    import ray

    if ray.is_initialized():  # the script's own instance (ray.data auto-starts one): the job's now
        address = ray.get_runtime_context().gcs_address
        if address not in _script_watchdogs:  # kept open until this process ends: the instance is the script's
            _script_watchdogs[address] = _watch()
        return Shared(rank, exchange, address)
    temp_dir = tempfile.mkdtemp(prefix="rtdray-")  # short: Ray's socket paths live under it
    atexit.register(_at_exit, temp_dir)  # a raise out of fit() before close(): the head and its dir end
    try:
        ray.init(
            _temp_dir=temp_dir,
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            log_to_driver=True,
            configure_logging=False,
        )
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    address = ray.get_runtime_context().gcs_address
    return Shared(rank, exchange, address, started_head=True, temp_dir=temp_dir, watchdog=_watch(temp_dir))


def _starttime(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _watch(temp_dir: str | None = None) -> Any:
    """A watchdog (``WATCHDOG``) over this process's Ray processes now; None where /proc is not there."""
    import subprocess
    import sys

    import psutil

    pids = []
    for p in psutil.Process().children(recursive=True):
        st = _starttime(p.pid)
        if st is not None:
            pids.append(f"{p.pid}:{st}")
    if not pids:
        return None
    return subprocess.Popen(
        [sys.executable, "-S", "-c", WATCHDOG, temp_dir or "-", *pids],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def _release(watchdog: Any) -> None:
    """Let a watchdog go: it kills what of its processes still runs, and ends."""
    if watchdog is None:
        return
    with contextlib.suppress(Exception):
        watchdog.stdin.close()
        watchdog.wait(10)


def _join(rank: int, exchange: ShardExchange, address: str, auth: str | None) -> Shared:
    import ray

    if ray.is_initialized():
        if ray.get_runtime_context().gcs_address == address:
            return Shared(rank, exchange, address)
        ray.shutdown()  # this rank's own auto-started instance: its datasets are rank 0's from here on
    if auth and os.environ.get(AUTH_MODE_VAR) != auth:
        # ray.init(address=...) never turns token auth on by itself; rank 0's head uses it (Ray's default
        # for a new local instance, with the user's ~/.ray token): as Ray's own _enable_token_auth does
        import importlib

        os.environ[AUTH_MODE_VAR] = auth
        importlib.import_module("ray._raylet").Config.initialize("")  # a compiled module: no attributes for mypy
    host = address.rsplit(":", 1)[0]
    ray.init(address=address, _node_ip_address=host, configure_logging=False)
    return Shared(rank, exchange, address, joined=True)


def _at_exit(temp_dir: str) -> None:
    import ray

    if _shared is not None and _shared.temp_dir == temp_dir:  # still open: fit() raised before close()
        with contextlib.suppress(Exception):
            ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


def _configure(datasets: dict[str, Any], data_config: Any, world_size: int, shared: Shared) -> list[dict[str, Any]]:
    """Every rank's iterators, made as Ray's DatasetManager makes them: one ``configure`` per dataset."""
    import ray
    from ray.train import DataConfig

    config = data_config if data_config is not None else DataConfig()
    node_ids = [ray.get_runtime_context().get_node_id()] * world_size
    per_rank: list[dict[str, Any]] = [{} for _ in range(world_size)]
    for name, ds in datasets.items():
        out = config.configure(
            datasets={name: ds}, world_size=world_size, worker_handles=None, worker_node_ids=node_ids
        )
        if len(out) != world_size:
            raise HarnessError(f"DataConfig.configure gave {len(out)} shards of {name!r} for {world_size} ranks")
        for i in range(world_size):
            per_rank[i][name] = out[i][name]
    shared.keep = per_rank
    return per_rank


def _hand_out(exchange: ShardExchange, make: Callable[[], list[dict[str, Any]]] | None) -> tuple:
    """Rank 0 makes every rank's iterators and broadcasts them pickled; each rank keeps its own."""
    from ray import cloudpickle

    blobs: list[bytes] | None = None
    message: str | None = None
    per_rank: list[dict[str, Any]] = []
    if make is not None:
        try:
            per_rank = make()
            blobs = [cloudpickle.dumps(it) for it in per_rank]
        except Exception as e:
            message = str(e) if isinstance(e, HarnessError) else f"could not shard the datasets: {e}"
    blobs, message = exchange.broadcast((blobs, message), src=0)
    if message:
        return {}, message
    rank = _shared.rank if _shared is not None else 0
    if make is not None:
        return per_rank[0], None
    assert blobs is not None
    try:
        return cloudpickle.loads(blobs[rank]), None
    except Exception as e:
        return {}, f"rank {rank} could not take its dataset shards from rank 0: {e}"


def _stop_executors(per_rank: list[dict[str, Any]]) -> None:
    """Stop the split coordinators' executors, as Ray's DatasetManager does after the worker group."""
    import ray

    coords = {id(c): c for its in per_rank for it in its.values() if (c := getattr(it, "_coord_actor", None))}
    with contextlib.suppress(Exception):
        ray.get([c.shutdown_executor.remote() for c in coords.values()], timeout=5)
