"""``rtdebug capsule DIR [--json]``: what a ``--capture`` folder holds, without running anything.

The job (script, arguments, world size, the versions it ran with), each captured rank's collectives, size and
where its capture ends (complete, or closed at collective #N by ``--capture-max-gb`` or a full disk, or
left open by a rank that died), and the script's sha256 against today's file. ``rtdebug replay DIR --info``
prints the same (``describe``). The capsule is read by ``rtdebug.capsule.read``, every tensor file opened,
so a damaged capsule is one line (``CapsuleError``, exit 1) here rather than halfway through a replay.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
from typing import Any

from rtdebug.commands.options import Options
from rtdebug.common.errors import printable

HASH_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True, kw_only=True)
class CapsuleOptions(Options):
    capsule: str
    json: bool = False


OPTIONS = CapsuleOptions


def add_parser(sub: argparse._SubParsersAction, summary: str) -> None:
    p = sub.add_parser(
        "capsule",
        help=summary,
        description="Show what a capsule (the folder `--capture DIR` wrote) holds: ranks, collectives, size, "
        "where each rank's capture ends, and the script's hash against today's file.",
    )
    p.add_argument("capsule", metavar="DIR", help="the folder --capture wrote")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")


def script_state(manifest: dict[str, Any], script: str | None = None) -> dict[str, Any]:
    """Today's file against the captured one: ``{"path", "state": same|differs|missing|module, "sha256"}``."""
    path = script or manifest.get("script")
    if manifest.get("module") and script is None:
        return {"path": path, "state": "module", "sha256": None}
    if not isinstance(path, str) or not os.path.isfile(path):
        return {"path": path, "state": "missing", "sha256": None}
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(HASH_CHUNK):
                digest.update(chunk)
    except OSError:
        return {"path": path, "state": "missing", "sha256": None}
    today = digest.hexdigest()
    return {"path": path, "state": "same" if today == manifest.get("script_sha256") else "differs", "sha256": today}


def summary(capsule: Any, script: str | None = None) -> dict[str, Any]:
    """The capsule's ``summary()`` with every rank's tensors checked and today's script compared."""
    for r in capsule.ranks:
        capsule.rank(r).check_tensors()
    out = dict(capsule.summary())
    out["script_today"] = script_state(capsule.manifest, script)
    out["missing_ranks"] = [r for r in range(capsule.world_size) if r not in capsule.ranks]
    return out


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _end(r: dict[str, Any]) -> str:
    reason, upto = r.get("end_reason") or "", r.get("complete_upto", 0)
    if reason == "ended":
        return f"complete (#1-#{upto})" if upto else "complete (no collective)"
    if not reason:
        return f"open: up to #{upto} (the rank did not close it: it died, or still runs)"
    return f"closed after #{upto}: {reason}"


SCRIPT_WORDS = {
    "same": "today's file is the captured one",
    "differs": "today's file DIFFERS from the captured one (a replay checks where it first sends something else)",
    "missing": "not found here (rtdebug replay --script PATH)",
    "module": "a module (-m): not hashed",
}


def ranges(ranks: list[int]) -> str:
    """``0,2-5,9``: a rank list as one short line, whatever the world size."""
    parts: list[str] = []
    for r in sorted(ranks):
        if parts and "-" not in parts[-1].split(",")[-1] and int(parts[-1]) == r - 1:
            parts[-1] = f"{parts[-1]}-{r}"
        elif parts and "-" in parts[-1] and int(parts[-1].split("-")[1]) == r - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{r}"
        else:
            parts.append(str(r))
    return ",".join(parts)


def describe(s: dict[str, Any]) -> str:
    """The text ``rtdebug capsule`` prints for ``summary``'s dict: the manifest's words made printable (a
    capsule is input: its strings may hold terminal escapes)."""
    return "\n".join(printable(line) for line in _describe(s))


def _describe(s: dict[str, Any]) -> list[str]:
    argv = s.get("argv") or []
    argv = " ".join(map(str, argv)) if isinstance(argv, list) else str(argv)
    today = s["script_today"]
    lines = [
        f"capsule {s['dir']} (format {s.get('format')}, created {s.get('created') or '?'})",
        f"job: {s['world_size']} ranks; script {s.get('script')}{' ' + argv if argv else ''}; cwd {s.get('cwd')}",
        f"made with Python {s.get('python')}, torch {s.get('torch')}, Ray {s.get('ray') or '-'}, "
        f"device {s.get('device')}",
        f"script sha256 {str(s.get('script_sha256'))[:16]}…: {SCRIPT_WORDS[today['state']]}",
        "",
        f"{'RANK':<6}{'COLLECTIVES':<13}{'GROUPS':<8}{'SIZE':<11}CAPTURE",
    ]
    for r in s["ranks"]:
        lines.append(f"{r['rank']:<6}{r['collectives']:<13}{r['groups']:<8}{_size(r['bytes']):<11}{_end(r)}")
    if s["missing_ranks"]:
        word = "rank" if len(s["missing_ranks"]) == 1 else "ranks"
        lines.append(f"not captured: {word} " + ranges(s["missing_ranks"]))
    return lines


def run(opts: CapsuleOptions) -> int:
    from rtdebug.capsule.read import open_capsule

    s = summary(open_capsule(opts.capsule))
    print(json.dumps(s, indent=1) if opts.json else describe(s))
    return 0
