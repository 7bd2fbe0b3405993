"""Each rank's ``DeviceMesh``es, as the job creates them: dimension names, shape, this rank's coordinates.

Why hook creation and not recompute from parallelism degrees: torchtitan's meshes overlap (``dp_shard``
and ``cp`` flattened into ``dp_shard_cp`` next to the root mesh), and only the meshes the job really made
say which process group serves which dimension. ``DeviceMesh.__init__`` runs for every root and flattened
mesh (a slice such as ``mesh["tp"]`` is a view of its root and adds nothing): the hook reads the new
mesh once, appends it to the rank's registry entry (``meshes``: the same entry the store and the Ray KV
publish), and costs nothing per step. Armed on every rank's start path; torch is touched only once the
job imports ``torch.distributed.device_mesh``.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from rtdebug.common import log
from rtdebug.common.imports import when_imported

MAX_MESHES = 16
_meshes: list[dict[str, Any]] = []
_waited: list[bool] = []  # --wait with mesh coordinates: decided once


def arm() -> None:
    when_imported("torch.distributed.device_mesh", _patch)


def coords() -> dict[str, int]:
    """This rank's coordinate in every named dimension of its meshes (the first mesh that names a dim wins)."""
    out: dict[str, int] = {}
    for m in _meshes:
        for dim, c in zip(m["dims"], m["coord"], strict=False):
            out.setdefault(dim, c)
    return out


def published() -> list[dict[str, Any]]:
    return list(_meshes)


def _patch(module: Any) -> None:
    cls = getattr(module, "DeviceMesh", None)
    if cls is None or getattr(cls, "_rtdebug_meshes", False):
        return
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        try:
            _add(self)
        except Exception as exc:  # never the job's failure: the mesh stays unpublished, said once
            log.swallowed("rank.meshes: never the job's failure: the mesh stays unpublished, said once")
            print(f"rtdebug: could not read a DeviceMesh for rtdebug's selectors: {exc}", file=sys.stderr)

    cls.__init__ = __init__
    cls._rtdebug_meshes = True


def _add(mesh: Any) -> None:
    coord = mesh.get_coordinate()
    if coord is None or len(_meshes) >= MAX_MESHES or not mesh.mesh_dim_names:
        return  # this rank is not in the mesh, or it has no names to select by (FSDP2's own default mesh)
    dims = [str(d) for d in mesh.mesh_dim_names]
    groups, descs = [], []
    for i in range(mesh.ndim):
        try:
            g = mesh.get_group(i)
            groups.append(str(g.group_name))
            descs.append(str(getattr(g, "group_desc", "")))
        except Exception:
            log.swallowed("rank.meshes: _add: going on")
            groups.append("")
            descs.append("")
    entry = {"dims": dims, "shape": [int(s) for s in mesh.mesh.shape], "coord": [int(c) for c in coord],
             "groups": groups, "descs": descs}  # fmt: skip
    if entry in _meshes:
        return
    _meshes.append(entry)
    from rtdebug.rank import runtime

    if runtime.record is not None:
        runtime.record.set(meshes=list(_meshes))
    _wait_if_chosen(runtime)


def _wait_if_chosen(runtime: Any) -> None:
    """``--wait tp=1``: a rank the selector chooses waits for a client here, once its mesh places it (the
    coordinates exist only from now on), in the frame that made the mesh."""
    import os

    from rtdebug.common import selector

    text = os.environ.get("RTDEBUG_WAIT", "")
    if not selector.is_mesh(text) or _waited or runtime.endpoint is None:
        return
    terms = selector.parse(text, "--wait")
    mine = coords()
    if not all(t.dim in mine for t in terms):
        return  # a later mesh may name the rest
    _waited.append(True)
    if selector.matches(terms, mine):
        ep = runtime.endpoint
        label = ", ".join(f"{d}={c}" for d, c in mine.items())
        print(f"rtdebug: rank {os.environ.get('RANK', '?')} ({label}) waiting for a debugger on {ep.host}:{ep.port}",
              file=sys.stderr, flush=True)  # fmt: skip
        ep.wait_for_client()
