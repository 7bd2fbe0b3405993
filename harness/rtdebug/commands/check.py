"""``rtdebug check``: is this ``--stop-on`` spec, or this rank selector, one the harness takes? Parsed by the
harness's own parsers (``rtdebug.common.stopon``, ``rtdebug.common.selector``, the rank lists of
``rtdebug.common.ports``), so a tool in front of the CLI (the VS Code extension) asks instead of keeping a
copy of the grammars and of their error texts.

- ``check --stop-on SPEC``: prints the canonical spelling (what the ranks are given); ``off`` for "".
- ``check --wait POLICY``: a ``--wait`` policy (``none``, ``all``, ``0,2-3``, or mesh coordinates ``tp=1``,
  which only the job's meshes resolve): prints the ranks it names, as ``run`` and ``torchrun`` read it.
- ``check --rank SEL``: rank numbers (``0,2-3``, ``all``) or mesh coordinates (``tp=0``, ``dp=0,tp=*``);
  with ``--session ID`` the ranks it chooses in that live session (mesh coordinates among its verified
  entries, as ``attach --rank`` and ``ps --rank`` resolve them), else only whether it parses.

A valid one exits 0; an invalid one is the one usage line every command prints for it, and exit 2.
``--json`` prints one object either way (``{"valid": false, "error": LINE}`` for a refusal, the line
without the ``rtdebug: error:`` prefix, which stderr still carries). Reads the registry, never writes it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from rtdebug.commands.options import Options, session_arg, view_options
from rtdebug.common import selector, stopon
from rtdebug.common.errors import HarnessError, usage
from rtdebug.common.ports import parse_rank_list
from rtdebug.registry.schema import ListedSession, RankEntry
from rtdebug.views.api import ViewOptions

# the Attach to Ranks… wording (attach.py's, with rank lists in it) for a spec that is neither form
_NEITHER = "a rank list such as 0,2-3 or mesh coordinates such as tp=1 or dp=0,tp=*"
_NO_MESH = "none: the job has made no DeviceMesh yet"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckOptions(Options):
    stop_on: str | None = None
    wait: str | None = None
    rank: str | None = None
    session: str | None = None
    json: bool = False
    views: ViewOptions = dataclasses.field(default_factory=ViewOptions)

    def __post_init__(self) -> None:
        if [self.stop_on, self.wait, self.rank].count(None) != 2:
            raise usage("check: give one of --stop-on SPEC, --wait POLICY or --rank SELECTOR")
        if self.session is not None and self.rank is None:
            raise usage("check: --session goes with --rank")


OPTIONS = CheckOptions


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], summary: str) -> None:
    p = sub.add_parser(
        "check",
        help=summary,
        description="Check a --stop-on spec, a --wait policy or a rank selector with the harness's own parsers: "
        "print what it means (exit 0) or the one-line refusal every command prints for it (exit 2).",
    )
    p.add_argument("--stop-on", metavar="SPEC", help=f"--stop-on conditions: {stopon.FORMS}")
    p.add_argument("--wait", metavar="POLICY", help="a --wait policy: none, all, ranks like 0,2-3, or tp=1")
    p.add_argument("--rank", metavar="SEL", help="rank numbers (0,2-3, all) or mesh coordinates (tp=0, dp=0,tp=*)")
    p.add_argument(
        "--session",
        type=session_arg,
        metavar="ID",
        help="with --rank: the ranks it chooses in this live session (its dimensions, its world size)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object, valid or not")
    view_options(p)


def stop_on(spec: str) -> dict[str, Any]:
    """What ``--stop-on spec`` means; a HarnessError (usage) when the harness refuses it."""
    s = stopon.parse(spec)
    return {
        "stop_on": s.text(),
        "nonfinite": s.nonfinite,
        "deep": s.deep,
        "disagree_every": s.disagree_every,
        "step": s.step,
    }


def wait(policy: str) -> dict[str, Any]:
    """The ranks a ``--wait`` policy names (``ranks`` None: all of them, or mesh coordinates, which the
    job's meshes resolve once it makes them); a HarnessError when refused, as ``rtdebug.common.config``."""
    if selector.is_mesh(policy):
        selector.parse(policy, "--wait")
        return {"wait": policy, "form": "mesh", "ranks": None}
    ranks = parse_rank_list(policy)
    return {"wait": policy.strip().lower(), "form": "ranks", "ranks": None if ranks is None else sorted(ranks)}


def dimensions(entries: list[RankEntry]) -> str:
    """``dp (0-1), tp (0-3)``: the valid dimensions, as the selector's refusals list them."""
    return ", ".join(f"{d} (0-{s - 1})" for d, s in selector.dims_of(entries).items()) or _NO_MESH


def _world_size(session: ListedSession) -> int:
    from rtdebug.registry.table import world_size

    return world_size(session)


def ranks(spec: str, session: ListedSession | None) -> dict[str, Any]:
    """What the rank selector ``spec`` chooses (in ``session`` when given); a HarnessError when refused."""
    text = spec.strip()
    mesh = selector.is_mesh(text)
    out: dict[str, Any] = {"rank": text, "form": "mesh" if mesh else "ranks"}
    if session is not None:
        out["session"] = session["session_id"]
        out["world_size"] = _world_size(session)
    if mesh:
        terms = selector.parse(text)  # a malformed selector is one line, whatever the session holds
        if session is None:
            out["ranks"] = None
            return out
        # a store entry anyone could have written does not get to define the coordinates
        known = [r for r in session.get("ranks", []) if r.get("verified") is not False]
        selector.check(terms, selector.dims_of(known))
        chosen = sorted(e["rank"] for e in known if selector.matches(terms, selector.coords_of(e)))
    else:
        try:
            listed = parse_rank_list(text)
        except HarnessError:
            raise usage(f"--rank {text!r}: {_NEITHER}") from None
        if listed is None:  # "all": every rank of the session
            if session is None:
                out["ranks"] = None
                return out
            listed = frozenset(range(out["world_size"]))
        chosen = sorted(listed)
    if not chosen:
        raise usage(f"--rank {text} selects no rank")
    if session is not None:
        world = out["world_size"]
        bad = [r for r in chosen if r >= world]
        if bad:
            raise usage(f"rank {bad[0]} is out of range: session {session['session_id']} has world size {world}")
    out["ranks"] = chosen
    return out


def _session(opts: CheckOptions) -> ListedSession | None:
    if opts.session is None:
        return None
    from rtdebug.registry.files import Registry
    from rtdebug.views.api import Views

    reg = Registry()
    return Views.open(opts.views, reg).find_session(opts.session)


def run(opts: CheckOptions) -> int:
    session = _session(opts)  # no such session: a runtime error (exit 1), not a verdict on the selector
    known = [r for r in session["ranks"] if r.get("verified") is not False] if session else []
    extra = {"dimensions": dimensions(known)} if session else {}
    try:
        if opts.stop_on is not None:
            answer = stop_on(opts.stop_on)
        elif opts.wait is not None:
            answer = wait(opts.wait)
        else:
            answer = ranks(opts.rank or "", session)
    except HarnessError as exc:
        if exc.exit_code != 2:
            raise
        if opts.json:
            print(json.dumps({"valid": False, "error": exc.message, **extra}))
        raise
    if opts.json:
        print(json.dumps({"valid": True, **answer, **extra}))
    elif opts.stop_on is not None:
        print(answer["stop_on"] or "off")
    elif opts.wait is not None:
        print(answer["wait"] if answer["ranks"] is None or not answer["ranks"] else ",".join(map(str, answer["ranks"])))
    elif answer["ranks"] is None:
        print(f"{answer['rank']}: valid {'mesh coordinates' if answer['form'] == 'mesh' else 'rank list'}")
    else:
        print(",".join(str(r) for r in answer["ranks"]))
    return 0
