"""The documentation stays true: its links resolve, the command reference has every option of every
command's ``--help``, it cites only files the repository has, the package map in docs/architecture.md names
every module of ``harness/rtdebug``, and the README stays a front door.

Links are checked as GitHub renders them: a relative path must exist, and a ``#anchor`` must be one of
the target page's headings under GitHub's anchor rules (lowercase; punctuation other than ``-`` and ``_``
dropped; spaces become ``-``; a repeated heading gets ``-1``, ``-2``). The options come from the parser
each ``rtdebug <command> --help`` really prints (for ``torchrun`` that is torch's own parser plus ours).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import subprocess
import warnings
from pathlib import Path

import pytest

from rtdebug import cli

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
COMMANDS_MD = ROOT / "docs" / "commands.md"
README_MAX_LINES = 220

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:, vscode:


def doc_pages() -> list[Path]:
    pages = [README, ROOT / "CHANGELOG.md", ROOT / "vscode-extension" / "README.md", ROOT / "bench" / "README.md"]
    pages += sorted((ROOT / "docs").glob("*.md"))
    return [p for p in pages if p.exists()]


def prose(text: str) -> str:
    """The text as rendered prose: fenced blocks and code spans blanked (a link inside code is no link)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), text)


def github_anchor(heading: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading counts by its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for m in HEADING.finditer(text):
        base = github_anchor(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """Each link of ``page`` (or of ``text``, read as if it were that page) that does not resolve."""
    bad = []
    for m in LINK.finditer(prose(page.read_text(encoding="utf-8") if text is None else text)):
        target = m.group(1)
        if EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT)}: ({target})"
        if not dest.exists():
            bad.append(f"{where}: no such file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{where}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    return bad


def test_github_anchor_rules() -> None:
    assert github_anchor("`rtdebug stacks --json`") == "rtdebug-stacks---json"
    assert github_anchor("All-stop (`rtdebug.allStop`, default **on**)") == "all-stop-rtdebugallstop-default-on"
    assert github_anchor("Ranks by mesh coordinates, and 1024 ranks") == "ranks-by-mesh-coordinates-and-1024-ranks"


def test_a_broken_link_is_caught() -> None:
    page = ROOT / "docs" / "index.md"
    text = "[a](index.md#no-such-heading) [b](no-such-page.md) [c](index.md) [e](#using-rtdebug) `[d](gone.md)`\n"
    bad = broken_links(page, text + "\n## Using rtdebug\n")
    assert len(bad) == 2 and "#no-such-heading" in bad[0] and "no-such-page.md" in bad[1], bad


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


# -- the command reference -------------------------------------------------------------------------


def help_parsers(command: str) -> list[argparse.ArgumentParser]:
    """Every parser that prints help for ``rtdebug <command> --help``: the one the CLI really uses."""
    printed: list[argparse.ArgumentParser] = []
    real = argparse.ArgumentParser.print_help

    def record(self: argparse.ArgumentParser, file: object = None) -> None:
        printed.append(self)
        real(self, io.StringIO())

    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(io.StringIO()):
        mp.setattr(argparse.ArgumentParser, "print_help", record)
        mp.setattr(warnings, "formatwarning", warnings.formatwarning)  # cli.main sets its own; put it back after
        assert cli.main([command, "--help"]) == 0
    return printed


def wanted(parser: argparse.ArgumentParser) -> list[tuple[str, ...]]:
    """What the reference must name for a parser: each option (any one of its spellings), each positional
    (by name), each choice; subcommands' parsers too."""
    out: list[tuple[str, ...]] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append((name,))
                out += wanted(sub)
            continue
        if action.option_strings:
            out.append(tuple(action.option_strings))
        elif action.dest != argparse.SUPPRESS:
            out.append((action.dest,))
        for choice in action.choices or ():
            if isinstance(choice, str):
                out.append((choice,))
    return out


def section(text: str, command: str) -> str | None:
    m = re.search(rf"^## rtdebug {re.escape(command)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1) if m else None


def named(word: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_commands_reference_has_every_option(command: str) -> None:
    if command == "torchrun" and importlib.util.find_spec("torch") is None:
        pytest.skip("rtdebug torchrun --help is torch's parser; torch is not installed")
    parsers = help_parsers(command)
    assert parsers, f"rtdebug {command} --help printed no parser's help"
    text = section(COMMANDS_MD.read_text(encoding="utf-8"), command)
    assert text is not None, f"docs/commands.md has no '## rtdebug {command}' section"
    missing = [" / ".join(spellings) for p in parsers for spellings in wanted(p)]
    missing = [m for m in missing if not any(named(s, text) for s in m.split(" / "))]
    assert missing == [], f"docs/commands.md's 'rtdebug {command}' section does not name: {', '.join(missing)}"


def test_a_missing_option_is_caught() -> None:
    text = section(COMMANDS_MD.read_text(encoding="utf-8"), "ps") or ""
    assert named("--json", text)
    assert not named("--json", text.replace("--json", "--jsonx"))
    assert not named("--rank", "`--ranks`") and named("-m", "`-m` / `--module`")


# -- what the pages cite ---------------------------------------------------------------------------

CITED = re.compile(r"`((?:harness|tests|bench|scripts|examples|constraints|docs|vscode-extension|rtdebug)/[\w./-]*)")


def cited_paths(page: Path) -> list[str]:
    out = []
    for m in CITED.finditer(page.read_text(encoding="utf-8")):
        path = m.group(1).split("::")[0].rstrip(".")
        if re.search(r"DATE|\bX\b|\.X|/\.work\b", path):  # a pattern, or the benches' git-ignored output
            continue
        out.append(path)
    return out


def exists(path: str) -> bool:
    base = ROOT / "harness" if path.startswith("rtdebug/") else ROOT
    p = base / path
    return p.exists() or (p.suffix == ".py" and p.with_suffix("").is_dir())  # a module may become a package


@pytest.mark.parametrize(
    "page", [p for p in doc_pages() if p.name != "CHANGELOG.md"], ids=lambda p: str(p.relative_to(ROOT))
)  # the changelog names what was, by design
def test_pages_cite_only_files_the_repository_has(page: Path) -> None:
    gone = sorted({p for p in cited_paths(page) if not exists(p)})
    hints = []
    for p in gone:
        moved = sorted(str(q.relative_to(ROOT)) for q in ROOT.glob(f"**/{Path(p).name}") if ".venv" not in q.parts)
        hints.append(f"{p}" + (f" (now {', '.join(moved[:3])}?)" if moved else ""))
    assert gone == [], f"{page.relative_to(ROOT)} cites files the repository does not have: {'; '.join(hints)}"


def test_no_tracked_file_mentions_the_missing_design_document() -> None:
    needle = "DESIGN" + ".md"  # spelled apart, so this file does not match itself
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    hits = []
    for name in files.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue
        try:
            if needle in path.read_text(encoding="utf-8"):
                hits.append(name)
        except (UnicodeDecodeError, OSError):
            continue
    assert hits == [], f"these tracked files cite {needle}, which the repository does not have: {hits}"


# -- the package map -------------------------------------------------------------------------------

ARCHITECTURE_MD = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "harness" / "rtdebug"


def package_map_rows(text: str) -> dict[str, set[str]]:
    """The package map's rows: each package the first cell names (``rtdebug/connect/``, ``rtdebug.cli``) -> the
    code spans of its row (``transport``, ``endpoint/``; ``adopt*`` names every module starting with ``adopt``)."""
    section = text.split("## The package map", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        for pkg in re.findall(r"`([^`]+)`", cells[0]):
            rows[pkg] = set(re.findall(r"`([^`]+)`", cells[-1]))
    return rows


def unnamed_modules(text: str, package: Path = PACKAGE) -> list[str]:
    """What the package map leaves out: each module (and subpackage) of ``package``, said as what to add where."""
    rows = package_map_rows(text)
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if path.name in ("__init__.py", "__main__.py"):
            continue
        if len(rel.parts) == 1:
            if f"rtdebug.{path.stem}" not in rows:
                missing.append(f"harness/rtdebug/{rel}: name `rtdebug.{path.stem}` in a row's first cell")
            continue
        row = f"rtdebug/{rel.parts[0]}/"
        if row not in rows:
            missing.append(f"harness/rtdebug/{rel}: add a row for `{row}` (runs in, what it holds)")
            continue
        names = [f"{d}/" for d in rel.parts[1:-1]] + [path.stem]
        for name in names:
            spans = rows[row]
            if name not in spans and not any(s.endswith("*") and name.startswith(s[:-1]) for s in spans):
                missing.append(f"harness/rtdebug/{rel}: add `{name}` (and what it holds) to the `{row}` row")
    return sorted(set(missing))


def test_the_package_map_names_every_module() -> None:
    missing = unnamed_modules(ARCHITECTURE_MD.read_text(encoding="utf-8"))
    assert missing == [], "docs/architecture.md's package map does not name:\n" + "\n".join(missing)


def test_a_module_left_out_of_the_package_map_is_caught() -> None:
    text = ARCHITECTURE_MD.read_text(encoding="utf-8")
    assert "`sshsays`" in text and "`rtdebug/connect/`" in text
    missing = unnamed_modules(text.replace("`sshsays`", "sshsays").replace("`rtdebug/inject/`", "rtdebug/inject/"))
    assert "harness/rtdebug/connect/sshsays.py: add `sshsays` (and what it holds) to the `rtdebug/connect/` row" in (
        missing
    )
    assert "harness/rtdebug/inject/runner.py: add a row for `rtdebug/inject/` (runs in, what it holds)" in missing


def test_readme_is_a_front_door() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; keep it under {README_MAX_LINES} (move detail to docs/)"
    )
