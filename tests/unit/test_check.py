"""``rtdebug check``: a --stop-on spec or a rank selector checked by the harness's own parsers, through the real
CLI (the VS Code extension asks it instead of keeping copies of the grammars). Exit 0 and what it means, or
the one usage line every command prints for it and exit 2; ``--json`` says the same as one object."""

from __future__ import annotations

import json

import pytest

from rtdebug.common import selector, stopon
from rtdebug.common.errors import HarnessError
from rtdebug.registry.files import Registry

from support.entries import rank, session
from support.jobs import rtdebug

FORMS = "the conditions are nonfinite, nonfinite:deep, disagree, disagree:N, step=N"


def refusal(*args: str) -> tuple[str, dict]:
    """The stderr line and the --json object of a refused check (both exit 2, one line each)."""
    plain, js = rtdebug("check", *args), rtdebug("check", *args, "--json")
    assert (plain.returncode, js.returncode) == (2, 2), (plain.stderr, js.stderr)
    assert plain.stdout == "" and plain.stderr.count("\n") == 1, plain
    assert js.stderr == plain.stderr
    return plain.stderr.rstrip("\n"), json.loads(js.stdout)


@pytest.mark.parametrize(
    "spec,canonical",
    [("nonfinite", "nonfinite"), (" step=3 , nonfinite:deep", "nonfinite:deep,step=3"), ("disagree", "disagree:100"),
     ("disagree:7,nonfinite", "nonfinite,disagree:7"), ("", "off")],
)  # fmt: skip
def test_a_valid_stop_on_prints_its_canonical_spelling(spec, canonical):
    out = rtdebug("check", f"--stop-on={spec}")
    assert (out.returncode, out.stdout, out.stderr) == (0, canonical + "\n", "")
    js = json.loads(rtdebug("check", f"--stop-on={spec}", "--json").stdout)
    parsed = stopon.parse(spec)
    assert js == {
        "valid": True,
        "stop_on": parsed.text(),
        "nonfinite": parsed.nonfinite,
        "deep": parsed.deep,
        "disagree_every": parsed.disagree_every,
        "step": parsed.step,
    }


@pytest.mark.parametrize(
    "spec,shown",
    [("nan", "'nan'"), ("nonfinite,", "''"), ("x" * 60, "'" + "x" * 40 + "'"), ("é'\"", "'\\xe9\\'\"'"),
     ("a'b", "\"a'b\""), ("☃", "'\\u2603'"), ("bad\tcond", "'bad\\tcond'")],
)  # fmt: skip
def test_a_bad_stop_on_is_the_line_every_command_prints(spec, shown):
    line, js = refusal(f"--stop-on={spec}")
    assert line == f"rtdebug: error: --stop-on: unknown condition {shown}; {FORMS}"
    assert js == {"valid": False, "error": line.removeprefix("rtdebug: error: ")}
    with pytest.raises(HarnessError) as exc:
        stopon.parse(spec)
    assert js["error"] == exc.value.message
    run = rtdebug("run", f"--stop-on={spec}", "no_such_script.py")
    assert (run.returncode, run.stderr.rstrip("\n").splitlines()[-1]) == (2, line)


def test_disagree_0_is_refused_as_at_least_1():
    line, js = refusal("--stop-on=disagree:0")
    assert line == "rtdebug: error: --stop-on disagree:0: N must be at least 1"


@pytest.mark.parametrize(
    "policy,shown,ranks",
    [("none", "none", []), (" ALL ", "all", None), ("0,2-3", "0,2,3", [0, 2, 3]), ("3, 1", "1,3", [1, 3])],
)
def test_a_wait_policy_says_the_ranks_it_names(policy, shown, ranks):
    out = rtdebug("check", f"--wait={policy}")
    assert (out.returncode, out.stdout) == (0, shown + "\n")
    js = json.loads(rtdebug("check", f"--wait={policy}", "--json").stdout)
    assert js == {"valid": True, "wait": policy.strip().lower(), "form": "ranks", "ranks": ranks}


def test_a_wait_by_mesh_coordinates_is_parsed_as_run_parses_it():
    js = json.loads(rtdebug("check", "--wait=dp=0,tp=*", "--json").stdout)
    assert js == {"valid": True, "wait": "dp=0,tp=*", "form": "mesh", "ranks": None}
    line, js = refusal("--wait=tp=x")
    assert line == "rtdebug: error: --wait 'tp=x': 'tp=x' is not DIM=N, DIM=*, DIM=A:B or DIM=(A,B,...)"
    gen = rtdebug("vscode", "--script", "t.py", "--wait=tp=x")
    assert (gen.returncode, gen.stderr.rstrip("\n").splitlines()[-1]) == (2, line)


@pytest.mark.parametrize("policy", ["first", "3-1", "-1", "0,x"])
def test_a_bad_wait_policy_is_the_line_run_and_torchrun_print(policy):
    line, js = refusal(f"--wait={policy}")
    assert line == f"rtdebug: error: invalid --wait value {policy!r}: use none, all, or ranks like 0,2-3"
    assert js == {"valid": False, "error": line.removeprefix("rtdebug: error: ")}
    gen = rtdebug("vscode", "--script", "t.py", f"--wait={policy}")
    assert (gen.returncode, gen.stderr.rstrip("\n").splitlines()[-1]) == (2, line)


@pytest.mark.parametrize(
    "text,form,ranks",
    [("0,2-3", "ranks", [0, 2, 3]), (" 1 ", "ranks", [1]), ("tp=0", "mesh", None), ("dp=(0,2),tp=*", "mesh", None),
     ("all", "ranks", None)],
)  # fmt: skip
def test_a_selector_without_a_session_is_only_parsed(text, form, ranks):
    out = rtdebug("check", f"--rank={text}", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"valid": True, "rank": text.strip(), "form": form, "ranks": ranks}


@pytest.mark.parametrize(
    "text,message",
    [("tp=x", "--rank 'tp=x': 'tp=x' is not DIM=N, DIM=*, DIM=A:B or DIM=(A,B,...)"),
     ("dp=0,tp=", "--rank 'dp=0,tp=': 'tp=' is not DIM=N, DIM=*, DIM=A:B or DIM=(A,B,...)"),
     ("x", "--rank 'x': a rank list such as 0,2-3 or mesh coordinates such as tp=1 or dp=0,tp=*"),
     ("3-1", "--rank '3-1': a rank list such as 0,2-3 or mesh coordinates such as tp=1 or dp=0,tp=*"),
     ("none", "--rank none selects no rank")],
)  # fmt: skip
def test_a_malformed_selector_is_one_usage_line(text, message):
    line, js = refusal(f"--rank={text}")
    assert line == f"rtdebug: error: {message}"
    assert js == {"valid": False, "error": message}


@pytest.fixture
def grid(registry_dir):
    """Session g1: 4 live ranks (this process) on a dp=2 x tp=2 mesh; session flat: 2 ranks, no mesh."""
    reg = Registry()
    reg.ensure()
    reg.write_new_session(dict(session("g1"), nproc_per_node=4))
    for r in range(4):
        reg.write_rank(dict(rank("g1", r), world_size=4, meshes=[{"dims": ["dp", "tp"], "shape": [2, 2],
                                                                  "coord": [r // 2, r % 2]}]))  # fmt: skip
    reg.write_new_session(session("flat"))
    for r in range(2):
        reg.write_rank(rank("flat", r))
    return reg


@pytest.mark.parametrize(
    "text,ranks", [("tp=0", [0, 2]), ("dp=1", [2, 3]), ("dp=0,tp=*", [0, 1]), ("0,3", [0, 3]), ("all", [0, 1, 2, 3])]
)
def test_in_a_session_a_selector_says_the_ranks_it_chooses(grid, text, ranks):
    out = rtdebug("check", f"--rank={text}", "--session", "g1", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "valid": True,
        "rank": text,
        "form": "mesh" if "=" in text else "ranks",
        "session": "g1",
        "world_size": 4,
        "ranks": ranks,
        "dimensions": "dp (0-1), tp (0-1)",
    }
    plain = rtdebug("check", f"--rank={text}", "--session", "g1")
    assert (plain.returncode, plain.stdout) == (0, ",".join(map(str, ranks)) + "\n")
    if "=" in text:  # the same ranks ps --rank lists
        ps = json.loads(rtdebug("ps", "--json", f"--rank={text}").stdout)["sessions"]
        assert [r["rank"] for s in ps if s["session_id"] == "g1" for r in s["ranks"]] == ranks


@pytest.mark.parametrize(
    "sid,text,message",
    [("g1", "pp=0", "--rank pp=0: unknown mesh dimension 'pp'; the dimensions are dp (0-1), tp (0-1)"),
     ("g1", "tp=2", "--rank tp=2: tp=2 is out of range; tp is 0-1"),
     ("g1", "dp=(0,5)", "--rank dp=(0,5): dp=5 is out of range; dp is 0-1"),
     ("g1", "dp=1:1", "--rank dp=1:1 selects no rank"),
     ("g1", "0,7", "rank 7 is out of range: session g1 has world size 4"),
     ("flat", "tp=0", "--rank tp=0: unknown mesh dimension 'tp'; the dimensions are none: the job has made no "
                      "DeviceMesh yet")],
)  # fmt: skip
def test_in_a_session_a_refusal_names_what_is_valid_there(grid, sid, text, message):
    line, js = refusal(f"--rank={text}", "--session", sid)
    assert line == f"rtdebug: error: {message}"
    dims = "dp (0-1), tp (0-1)" if sid == "g1" else "none: the job has made no DeviceMesh yet"
    assert js == {"valid": False, "error": message, "dimensions": dims}
    if "=" in text and "selects" not in message:  # the selector module's own words
        with pytest.raises(HarnessError) as exc:
            selector.resolve(text, grid.ranks(sid))
        assert exc.value.message == message


def test_the_empty_selector_still_says_the_session_dimensions(grid):
    """What an input box shows before anything is typed: the dimensions (the selector itself chooses none)."""
    _, js = refusal("--rank=", "--session", "g1")
    assert js == {"valid": False, "error": "--rank  selects no rank", "dimensions": "dp (0-1), tp (0-1)"}


def test_a_session_that_is_not_live_is_a_runtime_error(grid):
    out = rtdebug("check", "--rank=0", "--session", "gone", "--json")
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == "rtdebug: error: no live session 'gone'; see `rtdebug ps`\n"


ONE = "rtdebug: error: check: give one of --stop-on SPEC, --wait POLICY or --rank SELECTOR"


@pytest.mark.parametrize(
    "args,line",
    [([], ONE),
     (["--stop-on=nonfinite", "--rank=0"], ONE),
     (["--wait=all", "--rank=0"], ONE),
     (["--stop-on=nonfinite", "--session", "g1"], "rtdebug: error: check: --session goes with --rank"),
     (["--rank=0", "--session", "../x"], "invalid session id '../x'")],
)  # fmt: skip
def test_usage_mistakes_are_one_line_and_exit_2(args, line):
    out = rtdebug("check", *args)
    assert out.returncode == 2 and out.stdout == ""
    assert line in out.stderr.splitlines()[-1]


def test_help_names_every_option():
    out = rtdebug("check", "--help")
    assert out.returncode == 0
    for flag in ("--stop-on SPEC", "--wait POLICY", "--rank SEL", "--session ID", "--json", "--store HOST:PORT"):
        assert flag in out.stdout
