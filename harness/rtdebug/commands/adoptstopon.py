"""``rtdebug adopt --stop-on`` on a job adopted already: set the conditions in every live rank (by injection,
as the adoption itself), and say what each rank answered.

The ranks take the change from the next optimizer step they reach together (``rtdebug.rank.stopon.arm
.configure``): the injection reaches them one by one, and none may check alone. A rank that is not
adopted here (its code finds no rtdebug runtime) answers so, and nothing is set in it.
"""

from __future__ import annotations

import json
import secrets

from rtdebug.common.errors import HarnessError
from rtdebug.inject import runner as inject
from rtdebug.registry.entry import ATTACHABLE_STATES
from rtdebug.registry.files import Registry
from rtdebug.registry.schema import SessionEntry

_CONFIGURE = (  # ``rtdebug.rank.adopted.set_stop_on``: its answer, or "not adopted" where rtdebug never ran
    "import sys\nm = sys.modules.get('rtdebug.rank.adopted')\n"
    "result = dict(status='not adopted') if m is None else m.set_stop_on(SPEC, GEN)\n"
)


def code(spec: str, gen: str) -> str:
    """The lines run in each rank: the spec and generation go in as Python literals (``repr``), never as
    code."""
    return f"SPEC = {spec!r}\nGEN = {gen!r}\n" + _CONFIGURE


def summary(answers: list[str]) -> str:
    """One line for the ranks' answers (``rtdebug: rank N stops on ...``): the first that differs from
    the rest is said whole, else what they all stop on."""
    bad = [a for a in answers if " stops on " not in a and not a.endswith("--stop-on is off")]
    if bad:
        return bad[0]
    what = {a.split(" stops on ", 1)[1] if " stops on " in a else "" for a in answers}
    text = next(iter(what)) if len(what) == 1 else "mixed conditions"
    when = "from the next optimizer step they reach together (steps counted from there)"
    if not text:
        return f"rtdebug: {len(answers)} ranks: --stop-on is off {when}"
    return f"rtdebug: {len(answers)} ranks stop on {text} {when}"


def configure(reg: Registry, session: SessionEntry, spec: str, method: str, as_json: bool = False) -> int:
    sid = session["session_id"]
    live = [r for r in reg.ranks(sid) if reg.live_rank(r) and r["state"] in ATTACHABLE_STATES]
    if not live:
        raise HarnessError(f"session {sid} has no live adopted rank to set --stop-on in")
    pids = [int(r["pid"]) for r in live]
    gen = f"adopt-{sid}-{secrets.token_hex(6)}"  # fresh: an earlier change's keys in the store are not this one's
    answers = inject.run_all(pids, dict.fromkeys(pids, code(spec, gen)), method, reg.ensure())
    failed = {p: a for p, a in answers.items() if a.get("status") != "set"}
    if failed:
        pid, a = next(iter(failed.items()))
        raise HarnessError(f"session {sid}: could not set --stop-on in pid {pid}: {a.get('error') or a.get('status')}")
    lines = [str(a.get("stop_on", "")) for a in answers.values()]
    if as_json:
        print(json.dumps({"session_id": sid, "stop_on": spec, "answers": lines}, indent=1))
    else:
        print(summary(lines))
    return 0 if all(" stops on " in a or a.endswith("--stop-on is off") for a in lines) else 1
