"""``rtdebug adopt``'s injection: run the adopted rank runtime in every rank of a job at once, all or nothing.

``adopt`` has found the job and checked every rank before this runs. Here: create the session, inject
(``rtdebug.inject.runner``), record the job's time limits the ranks read; a rank that fails undoes the
others. Interrupted (Ctrl-C, a closed terminal, SIGTERM) from the session's creation to the end: every
thread held is put back first (``rtdebug.inject.sigdefer``), the ranks adopted so far are detached, a rank
whose code had not started finds its request gone and does nothing, and the session is removed; one line,
exit 128 + the signal. A rank whose code had started and could not answer in time undoes itself when it
ends; its session is then kept, stopped, so that its last word (``detached``) has somewhere to go.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from rtdebug.common.errors import HarnessError
from rtdebug.inject import jobs, sigdefer
from rtdebug.inject import runner as inject
from rtdebug.registry import signing
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import reserve_session

# The few lines run in a rank (``rtdebug.inject.runner``, which runs them only if the request is still
# there): import our rank runtime (from this installation's path if the job's Python lacks it) and call it;
# if its answer cannot be delivered (the shell gave up meanwhile), ``undo`` detaches again.
_ADOPT = "import sys\ntry:\n import rtdebug.rank.adopted as m\n added = None\nexcept ImportError:\n"
_ADOPT += " sys.path.append({path!r})\n added = {path!r}\n import rtdebug.rank.adopted as m\n"
_ADOPT += "result = m.main({spec!r}, added)\nundo = m.detach if result.get('status') == 'adopted' else None\n"

Answers = dict[int, dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Adoption:
    """One adoption: session ``sid`` takes ``job.ranks``, rank i's endpoint on ``host``:``ports[i]``."""

    reg: Registry
    sid: str
    job: jobs.Job
    ports: list[int]
    host: str
    allow: str
    method: str  # how code gets into the ranks (inject.method_for)
    stop_on: str | None = None  # --stop-on, set in every rank once adopted (None: left as it is)
    stop_on_gen: str = dataclasses.field(default_factory=lambda: f"adopt-{secrets.token_hex(6)}")  # alike in all
    stop_on_answers: list[str] = dataclasses.field(default_factory=list)  # each rank's line


def adopt_code(spec: dict[str, Any]) -> str:
    return _ADOPT.format(path=str(Path(__file__).resolve().parents[2]), spec=json.dumps(spec))


def _spec(a: Adoption, r: jobs.RankProc, port: int) -> dict[str, Any]:
    import importlib.util

    debugpy = importlib.util.find_spec("debugpy")
    job = a.job
    return {
        "debugpy_path": str(Path(debugpy.origin).parents[1]) if debugpy and debugpy.origin else None,
        "session_id": a.sid, "registry_dir": str(a.reg.root), "rank": r.rank, "local_rank": r.num("LOCAL_RANK"),
        "node_rank": r.num("GROUP_RANK"), "world_size": r.num("WORLD_SIZE", len(job.ranks)), "host": a.host,
        "port": port, "allow": a.allow, "script": job.script,
        # a multi-node job: its ranks publish into its store as launched ranks do (signed if you gave a secret)
        "store": job.store(), "run_id": job.run_id, "secret": signing.supplied_secret(),
        "stop_on": a.stop_on, "stop_on_gen": a.stop_on_gen,
    }  # fmt: skip


def guarded(a: Adoption, fresh: dict[str, Any] | None) -> float:
    """Create the session (``fresh``: its entry, for a new one) and adopt the ranks; from the session's
    creation on, a signal undoes it all (the module docstring). Returns how long the injection took."""
    with sigdefer.deferred() as guard:
        if fresh is not None:
            reserve_session(a.reg, fresh)
            secret = signing.supplied_secret()
            if secret and a.job.store():  # so that `ps` here verifies the store's entries of this job
                signing.ensure_secret(a.reg.session_dir(a.sid), secret)
        answers: Answers = {}
        try:
            start = time.monotonic()
            answers = _inject_ranks(a, remove=fresh is not None)
            took = time.monotonic() - start
            _record_limits(a, answers)
            guard.check()  # a signal that came after the injection undoes it too
        except sigdefer.Interrupted as exc:
            _undo(a, exc.answers or answers, remove=fresh is not None)
            why = f"{exc.message}; the job was left as it was (nothing was changed)"
            raise HarnessError(why, exc.exit_code) from None
    return took


def _record_limits(a: Adoption, answers: Answers) -> None:
    timeouts = [(float(x["pg_timeout_s"]), str(x.get("pg_timeout_source"))) for x in answers.values() if _seconds(x)]
    if timeouts:  # the shortest one ends the job first
        timeout, source = min(timeouts)
        a.reg.update_session(a.sid, pg_timeout_s=timeout, pg_timeout_source=source)
    a.reg.update_session(a.sid, state="running")


def _seconds(answer: dict[str, Any]) -> bool:
    value = answer.get("pg_timeout_s")
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def _inject_ranks(a: Adoption, remove: bool) -> Answers:
    """Adopt every rank of ``a.job``; if one fails, detach the others (and ``remove`` the session): one line.
    A signal raises ``sigdefer.Interrupted`` with the answers so far (the caller undoes them)."""
    ranks = a.job.ranks
    code = {r.pid: adopt_code(_spec(a, r, p)) for r, p in zip(ranks, a.ports, strict=True)}
    answers = inject.run_all([r.pid for r in ranks], code, a.method, a.reg.ensure())
    a.stop_on_answers.extend(str(x["stop_on"]) for x in answers.values() if "stop_on" in x)
    bad = {pid: x for pid, x in answers.items() if x.get("status") != "adopted"}
    if bad:
        _undo(a, answers, remove)
        pid0, x = next(iter(bad.items()))
        why = x.get("error") or x.get("status")
        if x.get("status") == "already":  # adopted through another registry ($RTDEBUG_REGISTRY_DIR)
            why = f"it was adopted already, as session {x.get('session_id')} of another registry"
        raise HarnessError(f"cannot adopt pid {pid0}: {why}; nothing was changed")
    return answers


def _undo(a: Adoption, answers: Answers, remove: bool) -> None:
    """Detach the ranks ``answers`` says were adopted and remove the (new) session: a failed or interrupted
    adoption leaves nothing behind. Runs to its end even after a signal (a fresh guard); a rank whose code
    had started but not answered undoes itself, and the session is kept, stopped, for its last entry."""
    done = [p for p, x in answers.items() if x.get("status") == "adopted"]
    if done:
        inject.detach_pids(done, a.method, a.reg.ensure(), guard=sigdefer.Guard())
    if remove and any(x.get("taken") for x in answers.values()):
        a.reg.update_session(a.sid, state="stopped", ended_at=time.time(), error="adopt gave up on a rank mid-way")
    elif remove:
        shutil.rmtree(a.reg.session_dir(a.sid), ignore_errors=True)
