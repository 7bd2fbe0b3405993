"""``--check-collectives``: torch's collective-mismatch error as one line.

With ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` torch wraps the process group and, before
every collective, compares each rank's fingerprint (sequence number, op, shapes,
dtypes) across ranks. A mismatch raises a ``RuntimeError`` of several hundred
characters in every rank involved. This module reduces it to the ranks, the ops
and the user's call site. The raising rank's own fingerprint is exact; the
peer's is what torch reports, which is only trustworthy when both are at the
same sequence number (otherwise torch often shows its own helper collective).
"""

from __future__ import annotations

import os
import re
import traceback

MISMATCH = "Detected mismatch between collectives on ranks"
PAIR_RE = re.compile(
    r"Rank (\d+) is running collective: CollectiveFingerPrint\((.*?)\), but Rank (\d+) is running "
    r"collective: CollectiveFingerPrint\((.*?)\)\.\s*Collectives differ",
    re.S,
)


def fingerprint(text: str) -> dict[str, str]:
    out = {}
    for key, pattern in (
        ("seq", r"SequenceNumber=(\d+)"),
        ("op", r"OpType=(\w+)"),
        ("shape", r"TensorShape=\[([^\]]*)\]"),
        ("dtype", r"TensorDtypes=(\w+)"),
    ):
        m = re.search(pattern, text)
        if m:
            out[key] = m.group(1)
    return out


def describe(fp: dict[str, str]) -> str:
    text = f"{fp.get('op', '?')} #{fp.get('seq', '?')}"
    if "shape" in fp:
        text += f" [{fp['shape']}]"
    if "dtype" in fp:
        text += f" {fp['dtype']}"
    return text


def call_site(exc: BaseException) -> str | None:
    """``hang.py:26 (evaluate)``: the innermost user frame of the exception's traceback."""
    from rtdebug.stacks.group import frame_kind

    for fs in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame_kind(fs.filename) == "user":
            return f"{os.path.basename(fs.filename)}:{fs.lineno} ({fs.name})"
    return None


def explain(exc: BaseException) -> str | None:
    """One line for torch's collective mismatch error, else None."""
    text = str(exc)
    if not isinstance(exc, RuntimeError) or MISMATCH not in text:
        return None
    m = PAIR_RE.search(text)
    if m is None:
        return "collective mismatch (--check-collectives): " + " ".join(text.split())[:300]
    me, mine, peer, theirs = int(m.group(1)), fingerprint(m.group(2)), int(m.group(3)), fingerprint(m.group(4))
    where = call_site(exc)
    line = f"collective mismatch (--check-collectives): rank {me} called {describe(mine)}"
    if where:
        line += f" at {where}"
    if mine.get("seq") == theirs.get("seq"):
        return line + f", rank {peer} called {describe(theirs)}"
    return line + f", rank {peer} is at another collective (torch reports {describe(theirs)})"
