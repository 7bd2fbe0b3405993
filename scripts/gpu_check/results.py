"""The GPU check's results: one object per check, their file, and the one-screen summary.

    python scripts/gpu_check/results.py $OUT/gpu-check.json     # prints the summary again

``gpu-check.json`` is ``{"meta": {...}, "checks": [{"name", "ok", "details", "seconds"}, ...]}``; ``meta`` says
where it ran (torch, CUDA, GPU, Python, dry or not). ``load`` refuses anything else in one line.
"""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

WIDTH = 100  # the summary's lines are cut here
RATIOS = ("lazy_vs_plain", "stopon_vs_off", "collrec_on_vs_off")


class ResultsError(ValueError):
    """A results file that is not what ``write`` makes."""


@dataclass
class Result:
    name: str
    ok: bool
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def write(path: Path, meta: dict[str, Any], results: list[Result]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"meta": meta, "checks": [asdict(r) for r in results]}, indent=1, default=str))
    tmp.replace(path)


def _result(i: int, obj: Any) -> Result:
    if not isinstance(obj, dict):
        raise ResultsError(f"check {i}: not an object")
    name, ok, details, seconds = obj.get("name"), obj.get("ok"), obj.get("details"), obj.get("seconds")
    if not isinstance(name, str) or not name:
        raise ResultsError(f"check {i}: no name")
    if not isinstance(ok, bool):
        raise ResultsError(f"check {name}: ok is not true or false")
    if not isinstance(details, dict):
        raise ResultsError(f"check {name}: details is not an object")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise ResultsError(f"check {name}: seconds is not a number of seconds")
    return Result(name, ok, details, float(seconds))


def parse(text: str) -> tuple[dict[str, Any], list[Result]]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ResultsError(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("checks"), list):
        raise ResultsError('not a GPU check result (no "checks" list)')
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise ResultsError("meta is not an object")
    results = [_result(i, c) for i, c in enumerate(data["checks"])]
    names = [r.name for r in results]
    if len(set(names)) != len(names):
        raise ResultsError("a check is named twice")
    return meta, results


def load(path: Path) -> tuple[dict[str, Any], list[Result]]:
    return parse(path.read_text())


def _cut(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."


def _wrapped(head: str, gist: str, most: int = 2) -> list[str]:
    """A check's line, its gist wrapped under it at most ``most`` lines deep (the rest is in the JSON)."""
    lines = textwrap.wrap(gist, WIDTH - len(head)) or [""]
    out = [(head + lines[0]).rstrip()] + [" " * len(head) + ln for ln in lines[1:most]]
    if len(lines) > most:
        out[-1] = _cut(out[-1] + " ...")
    return out


def _gist(r: Result) -> str:
    """A check's one line: its error when it failed, else its own short ``summary``, else nothing."""
    d = r.details
    for key in ("error", "summary"):
        if isinstance(d.get(key), str) and d[key]:
            return " ".join(d[key].split())
    return ""


def summary(meta: dict[str, Any], results: list[Result]) -> str:
    failed = [r.name for r in results if not r.ok]
    where = ", ".join(f"{k} {meta[k]}" for k in ("gpu", "torch", "cuda", "python") if meta.get(k))
    head = "gpu-check: " + (f"{len(failed)} of {len(results)} checks FAILED" if failed else f"all {len(results)} ok")
    lines = [head + (" (dry run on CPU: proves nothing about a GPU)" if meta.get("dry") else "")]
    if where:
        lines.append(where)
    lines.append("")
    for r in results:
        lines += _wrapped(f"{'ok  ' if r.ok else 'FAIL'} {r.name:<20} {r.seconds:6.1f} s  ", _gist(r))
    ratios = next((r.details.get("ratios") for r in results if isinstance(r.details.get("ratios"), dict)), None)
    if ratios:
        lines.append("")
        lines.append("steps/s ratios (same run): " + ", ".join(f"{k} {_num(ratios.get(k))}" for k in RATIOS))
    if failed:
        lines += ["", "failed: " + ", ".join(failed) + " (details in gpu-check.json, logs in logs/)"]
    return "\n".join(lines) + "\n"


def _num(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "n/a"


def markdown(meta: dict[str, Any], results: list[Result]) -> str:
    """bench/results/gpu-check.md for one run: where, each check's verdict and gist, the ratios."""
    failed = [r.name for r in results if not r.ok]
    lines = [
        "# GPU check: the last run",
        "",
        f"Run {meta.get('started', '?')} by `bash scripts/gpu-check.sh` "
        "(docs/gpu-check.md); the whole result is that run's `$OUT/gpu-check.json`.",
        "",
    ]
    keys = ("gpu", "nvidia_smi", "torch", "cuda", "python", "commit", "dry")
    lines += [f"- {k}: {meta[k]}" for k in keys if k in meta]
    verdict = f"{len(failed)} of {len(results)} checks failed: {', '.join(failed)}" if failed else "every check ok"
    lines += ["", f"**{verdict}.**", "", "| check | ok | s | what it found |", "|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.name} | {'ok' if r.ok else 'FAIL'} | {r.seconds:.1f} | {_gist(r).replace('|', '/')} |")
    ratios = next((r.details.get("ratios") for r in results if isinstance(r.details.get("ratios"), dict)), None)
    if ratios:
        lines += [
            "",
            "steps/s ratios, measured in the same run: " + ", ".join(f"{k} {_num(ratios.get(k))}" for k in RATIOS),
        ]
    return "\n".join(lines) + "\n"


USAGE = "usage: results.py [--markdown] GPU_CHECK_JSON   (the one-screen summary, or bench/results/gpu-check.md)"


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    md = argv[:1] == ["--markdown"]
    args = argv[1:] if md else argv
    if len(args) != 1 or args[0].startswith("-"):
        print(f"gpu-check: error: {USAGE}", file=sys.stderr)
        return 2
    try:
        meta, results = load(Path(args[0]))
    except (OSError, ResultsError) as exc:
        print(f"gpu-check: error: {args[0]}: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(markdown(meta, results) if md else summary(meta, results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
