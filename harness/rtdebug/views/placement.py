"""Where every rank of a running multi-node job really is, for ``rtdebug vscode``'s attach configs.

c10d places nodes at run time, so a node list given up front (``--hosts``) is only a guess: when the
job is visible through its store, its own placement wins, and a guess that disagrees is named.
"""

from __future__ import annotations

from typing import Any

from rtdebug.common import warns
from rtdebug.views.api import Views
from rtdebug.views.store import connect_host


def job_endpoints(opts: Any, nproc: int, nnodes: int, hosts: list[str] | None) -> dict[int, tuple[str, int]] | None:
    """Where every rank of the running multi-node job really is (``rtdebug vscode``), or None.

    c10d places nodes at run time, so ``--hosts`` (node index -> host) is only a guess: when
    the job is visible its placement is used, and a ``--hosts`` that disagrees is named. Only a job
    whose every rank entry is verified (signed with a job secret this machine knows) is used: an
    unverified host never reaches ``launch.json``."""
    for s in sorted(Views.open(opts).sessions(), key=lambda s: s.get("started_at", 0), reverse=True):
        ranks = {r["rank"]: r for r in s.get("ranks", [])}
        if not s.get("store") or not ranks or sorted(ranks) != list(range(ranks[min(ranks)]["world_size"])):
            continue
        if len(ranks) != nproc * nnodes:
            continue
        if not all(r.get("verified") for r in ranks.values()):
            warns.warn(
                f"job {s['session_id']} (via {s.get('source')}) has unverified rank entries: its placement is "
                f"not used (set the job's RTDEBUG_JOB_SECRET here to verify it)",
                stacklevel=2,
            )
            continue
        out = {n: (connect_host(r)[0], int(r["port"])) for n, r in ranks.items()}
        wrong = [n for n, (h, _) in out.items() if hosts is not None and hosts[n // nproc] != h]
        if wrong and hosts is not None:
            n = wrong[0]
            warns.warn(
                f"rank {n} of job {s['session_id']} runs on {out[n][0]}, not on --hosts entry "
                f"{hosts[n // nproc]} (c10d places nodes at run time); the configs use the job's placement",
                stacklevel=2,
            )
        return out
    return None
