"""``rtdebug adopt PID`` of a Ray Train worker: ask the process for its rank before adopting it.

Ray sets a worker's rank in the process (``ray.train.get_context()``), never in its environment, so the
shell cannot place its endpoint (base + world rank) from ``/proc``. A few self-contained lines are run in
the worker first (``rtdebug.inject.runner``, as the adoption itself is): they read the train context and
answer with the ranks; rtdebug is not imported there, so a worker that cannot be adopted keeps nothing.
The answer is the worker's own (same uid), still checked: four small non-negative integers or a refusal.
"""

from __future__ import annotations

from rtdebug.common.errors import HarnessError
from rtdebug.inject import jobs
from rtdebug.inject import runner as inject
from rtdebug.registry.files import Registry

PROBE = """
try:
    import ray.train
    c = ray.train.get_context()
    result = {"RANK": c.get_world_rank(), "LOCAL_RANK": c.get_local_rank(), "GROUP_RANK": c.get_node_rank(),
              "WORLD_SIZE": c.get_world_size()}
except Exception as e:
    result = {"error": f"{type(e).__name__}: {e}"}
"""
FIELDS = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE")


def probe(job: jobs.Job, method: str, reg: Registry) -> None:
    """Fill each worker's RANK, LOCAL_RANK, GROUP_RANK and WORLD_SIZE from its train context; one line if
    it has none (not training yet, or not a Ray Train worker)."""
    pids = [r.pid for r in job.ranks]
    answers = inject.run_all(pids, dict.fromkeys(pids, PROBE), method, reg.ensure())
    for r in job.ranks:
        a = answers[r.pid]
        values = [a.get(k) for k in FIELDS]
        if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 20 for v in values):
            why = a.get("error") or a
            raise HarnessError(
                f"Ray worker pid {r.pid} has no Ray Train context to adopt ({why}); the job was not touched"
            )
        r.env.update({k: str(v) for k, v in zip(FIELDS, values, strict=True)})
