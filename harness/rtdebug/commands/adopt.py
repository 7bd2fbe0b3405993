"""``rtdebug adopt``: give every rank of a running torchrun job (started without rtdebug) a debug endpoint.

Find the job (``rtdebug.inject.jobs``), check that every rank can be injected into before touching any
(``rtdebug.inject.runner.refusal``), register a session of mode ``adopted`` whose launcher is the job's
torchrun agent (so ``ps`` keeps it live exactly while the job runs), run the adopted rank runtime in
every rank at once (``adoptranks``: all or nothing, undone on a signal), and print the rank table.
``--detach`` (and ``rtdebug stop`` of an adopted session) undoes an adoption in every rank and leaves the
job running. In a multi-node job the ranks also publish into the job's store (``rtdebug.inject.jobs.Job.store``)
as launched ranks do, so ``ps --store`` on any machine sees every node that was adopted; the entries are
signed only if ``RTDEBUG_JOB_SECRET`` (or ``_FILE``) is set for ``adopt``, else shown unverified. ``--list``:
``adoptlist``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from rtdebug.commands import adoptranks
from rtdebug.commands.options import Options, session_arg
from rtdebug.common.errors import HarnessError, usage
from rtdebug.common.ports import DEFAULT_PORT_BASE, check_ports_free, ports_for_ranks
from rtdebug.inject import jobs
from rtdebug.inject import runner as inject
from rtdebug.registry import signing
from rtdebug.registry.entry import new_session_id, session_entry
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune
from rtdebug.registry.schema import SessionEntry, SessionWithRanks
from rtdebug.registry.table import format_table
from rtdebug.views.teardown import detach_adopted


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdoptOptions(Options):
    """One of three: ``list`` the jobs here, ``detach`` a session, or adopt the job of ``pid`` (None: the
    only one here)."""

    pid: int | None = None
    debug_port_base: int = DEFAULT_PORT_BASE
    debug_host: str = "127.0.0.1"
    debug_allow: str = ""
    json: bool = False
    detach: str | None = None
    list: bool = False
    stop_on: str | None = None

    def __post_init__(self) -> None:
        if self.list and (self.detach or self.pid is not None):
            raise usage("adopt --list takes no PID and no --detach")
        if self.stop_on is not None and (self.list or self.detach):
            raise usage("adopt --stop-on goes with adopting a job, not with --list or --detach")
        if self.stop_on:
            from rtdebug.common import stopon

            stopon.parse(self.stop_on)  # a bad condition is one usage line, before anything is touched


OPTIONS = AdoptOptions


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], summary: str) -> None:
    p = sub.add_parser(
        "adopt",
        help=summary,
        description="Adopt a running torchrun job or Ray Train worker: inject rtdebug's lazy debug endpoint "
        "(base + RANK), the stacks handler and a registry entry into each of its ranks. PID: the torchrun "
        "agent, any rank, or a Ray Train worker (default: the only torchrun job of yours on this machine; "
        "--list shows the candidates). Multi-node: adopt on each node; the ranks "
        "publish into the job's store (rtdebug ps --store), signed with RTDEBUG_JOB_SECRET (or _FILE) if set "
        "here, else listed as unverified.",
    )
    p.add_argument("pid", nargs="?", type=int, help="torchrun agent, rank or Ray Train worker pid")
    p.add_argument("--debug-port-base", type=int, default=DEFAULT_PORT_BASE, metavar="P", help="rank N on P + N")
    p.add_argument("--debug-host", default="127.0.0.1", metavar="H", help="address the endpoints bind")
    p.add_argument("--debug-allow", default="", metavar="ADDR|CIDR,...", help="other machines allowed in")
    p.add_argument("--json", action="store_true", help="print the session and its ranks as JSON")
    p.add_argument("--detach", type=session_arg, metavar="SESSION", help="undo an adoption; the job runs on")
    p.add_argument("--list", action="store_true", help="the jobs here you can adopt (--json: as JSON)")
    p.add_argument(
        "--stop-on", metavar="COND[,COND]",
        help="also stop every rank when training goes wrong (as torchrun --stop-on; '' turns it off): in force "
        "from the next optimizer step all ranks reach together, steps counted from there; on an adopted job, "
        "only sets the conditions",
    )  # fmt: skip


def run(opts: AdoptOptions) -> int:
    """``rtdebug adopt``'s dispatch: --list, --detach, or adopt."""
    from rtdebug.common.config import check_host

    if opts.list:
        from rtdebug.commands import adoptlist

        return adoptlist.show(opts.json)
    if opts.detach:
        return detach(opts.detach)
    check_host(opts.debug_host)
    return adopt(opts)


# the session's pg_timeout_source until a rank has read its group's timeout
UNREAD = "unknown: not read in a rank (no process group yet?)"


def _pick(pid: int | None) -> jobs.Job:
    if pid is not None:
        return jobs.find_job(pid, ray=True)
    found = jobs.candidates()
    if len(found) == 1:
        return found[0]
    if not found:
        raise HarnessError("no torchrun job or Ray Train worker of yours runs on this machine")
    for j in found:
        print(f"  {j.describe()}", file=sys.stderr)
    raise usage(f"{len(found)} torchrun jobs run here (listed above); name one: rtdebug adopt PID")


def _existing(reg: Registry, job: jobs.Job) -> SessionWithRanks | None:
    """A live session that already covers this job's agent (adopted or launched by rtdebug)."""
    for s in prune(reg):
        if job.agent_pid in (s.get("agent_pid"), s.get("launcher_pid")):
            return s
    return None


def _session(sid: str, job: jobs.Job, host: str, base: int, ports: list[int], method: str) -> dict[str, Any]:
    e = session_entry(
        sid, "adopted", script=job.script, nnodes=str(job.nnodes), nproc_per_node=len(job.ranks), host=host,
        port_base=base, ports=ports, agent_pid=job.agent_pid, agent_create_time=job.agent_create_time,
        node_rank=job.ranks[0].num("GROUP_RANK"), pg_timeout_s=None, pg_timeout_source=UNREAD,
        nccl_heartbeat_s=job.heartbeat_s(), **({"store": job.store(), "rdzv_id": job.run_id} if job.store() else {}),
    )  # fmt: skip
    # the job's agent stands for the launcher: liveness keeps the session live exactly while the job runs
    e.update(launcher_pid=job.agent_pid, launcher_create_time=job.agent_create_time)
    return e


def _method(pid: int) -> str:
    return inject.method_for(pid)


def refuse_any(job: jobs.Job, method: str) -> None:
    """One line for the first rank that cannot be injected into; nothing has been touched yet."""
    for r in job.ranks:
        why = inject.refusal(r.pid, method)
        if why is not None:
            raise HarnessError(f"cannot adopt rank {r.rank}: {why}; the job was not touched")


def adopt(opts: AdoptOptions) -> int:
    reg = Registry()
    job = _pick(opts.pid)
    if job.under_rtdebug:
        raise HarnessError(f"the job of {job.kind} pid {job.agent_pid} runs under rtdebug already: see rtdebug ps")
    method = _method(job.ranks[0].pid)
    base, host = opts.debug_port_base, opts.debug_host
    already = _existing(reg, job)
    if already is not None:  # adopted: only ranks torchrun has started since (an elastic restart) are new
        sid = already["session_id"]
        covered = {r["pid"] for r in reg.ranks(sid) if reg.live_rank(r) and r["state"] in ("ready", "attached")}
        job.ranks = [r for r in job.ranks if r.pid not in covered]
        if not job.ranks and opts.stop_on is not None:
            from rtdebug.commands import adoptstopon

            return adoptstopon.configure(reg, already, opts.stop_on, method, opts.json)
        if not job.ranks:
            return _print(already, reg, opts.json, f"already adopted (session {sid}); nothing changed")
        base, host = int(already["port_base"]), str(already["host"])
    refuse_any(job, method)
    if job.kind == "ray":  # its rank is known only in the process: ask it (nothing is left there)
        from rtdebug.commands import adoptray

        adoptray.probe(job, method, reg)
    signing.supplied_secret()  # a bad RTDEBUG_JOB_SECRET(_FILE) is refused before anything is touched
    ports = ports_for_ranks(base, [r.rank for r in job.ranks])
    check_ports_free(ports, host)
    fresh = None
    if already is None:
        sid = new_session_id()
        fresh = _session(sid, job, host, base, ports, method)
    adoption = adoptranks.Adoption(reg, sid, job, ports, host, opts.debug_allow, method, stop_on=opts.stop_on)
    took = adoptranks.guarded(adoption, fresh)
    note = None if already is None else f"session {sid}: adopted its {len(job.ranks)} ranks started (or detached) since"
    session = reg.read_session(sid)
    if session is None:  # its own entry, written just now
        raise HarnessError(f"session {sid} has no readable registry entry; see rtdebug ps")
    code = _print(session, reg, opts.json, note, took)
    if opts.stop_on is not None and not opts.json:
        from rtdebug.commands import adoptstopon

        print(adoptstopon.summary(adoption.stop_on_answers))
    return code


def _print(session: SessionEntry, reg: Registry, as_json: bool, note: str | None, took: float = 0.0) -> int:
    sid = session["session_id"]
    ranks = reg.ranks(sid)
    if as_json:
        print(json.dumps({**session, "ranks": ranks, "note": note, "adopt_s": round(took, 3)}, indent=1))
        return 0
    if note:
        print(f"rtdebug: {note}")
    else:
        print(f"rtdebug: session {sid} adopted {_what(session)} pid {session['agent_pid']} ({len(ranks)} local ranks, "
              f"{session['script']}) in {took:.2f} s")  # fmt: skip
    print(f"rtdebug: warning: {limits(session)}")
    print(format_table(ranks, sid))
    if session.get("store"):
        signed = "signed with RTDEBUG_JOB_SECRET" if signing.supplied_secret() else "unsigned: no RTDEBUG_JOB_SECRET"
        print(f"rtdebug: the ranks publish into the job's store ({signed}): rtdebug ps --store {session['store']}")
    print(f"rtdebug: to leave the job as it was: rtdebug stop --session {sid} (or adopt --detach); the job runs on")
    return 0


def _what(session: SessionEntry) -> str:
    return "Ray Train worker" if session.get("script") == jobs.RAY_WORKER_TITLE else "torchrun"


def limits(session: SessionEntry) -> str:
    """The adopted job's own time limits, fixed when it started: the line that warns about pausing."""
    timeout = session.get("pg_timeout_s")
    what = (
        f"this job's process-group timeout is {timeout:g} s ({session.get('pg_timeout_source')})"
        if timeout
        else "this job's process-group timeout could not be read (no process group yet?); torch's default is "
        "1800 s (gloo) or 600 s (NCCL)"
    )
    beat = session.get("nccl_heartbeat_s")
    beat_line = f"; NCCL's heartbeat monitor ends a rank stuck {beat:g} s" if beat else ""
    return f"{what}{beat_line}; it cannot be raised now: a rank paused longer than that ends the job"


def detach(session_id: str) -> int:
    """Undo the adoption of ``session_id`` in every live rank; the job keeps running."""
    reg = Registry()
    prune(reg)
    session = reg.read_session(session_id)
    if session is None or session.get("mode") != "adopted":
        raise HarnessError(f"no adopted session {session_id}; see rtdebug ps")
    print(detach_adopted(reg, session))
    return 0
