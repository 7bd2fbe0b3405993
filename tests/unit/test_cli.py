import json

import pytest

from rtdebug import cli
from rtdebug.commands.options import our_flags, torchrun_parser, without_our_options
from rtdebug.commands.torchrun import TorchrunOptions
from rtdebug.launcher.torchrun import local_global_ranks, plan_torchrun


def parse(tokens):
    opts = TorchrunOptions.from_args(cli.build_parser("torchrun").parse_args(["torchrun", *tokens]))
    return opts.parsed, opts.rest


def test_our_options_sit_anywhere_before_the_script_and_torchrun_gets_its_own_back():
    tokens = ["--nproc-per-node", "2", "--wait", "0", "--tee", "3", "--eager", "--pg-timeout=5", "--pg-time", "7"]
    ns, rest = parse([*tokens, "train.py", "--wait", "x"])
    assert rest == ["--nproc-per-node", "2", "--tee", "3", "train.py", "--wait", "x"]
    assert (ns.wait_ranks, ns.eager, ns.pg_timeout, ns.nproc_per_node) == ("0", True, 7.0, "2")
    assert ns.training_script_args == ["--wait", "x"]  # after the script: the script's


def test_our_option_names_never_collide_with_torchruns():
    from torch.distributed.run import get_args_parser

    torchs = {s for a in get_args_parser()._actions for s in a.option_strings}
    ours = our_flags(torchrun_parser())
    assert ours and not set(ours) & torchs
    assert not [(t, o) for t in torchs for o in ours if t.startswith("--") and o.startswith(t)]  # no prefixes
    assert without_our_options(["--hang-report", "5", "--nnodes=1"], ours) == ["--nnodes=1"]


def test_plan_passes_torchrun_options_and_script_args(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("")
    ns, rest = parse(
        [
            "--debug-port-base",
            "7000",
            "--nproc-per-node",
            "3",
            "--master-port",
            "29999",
            "--local-ranks-filter",
            "0",
            str(script),
            "--lr",
            "1",
        ]
    )
    plan = plan_torchrun(ns, rest)
    assert plan.torchrun_options == ["--nproc-per-node", "3", "--master-port", "29999", "--local-ranks-filter", "0"]
    assert plan.torchrun_args()[-5:] == ["-m", "rtdebug.rank.bootstrap", str(script), "--lr", "1"]
    assert plan.local_ranks == [0, 1, 2] and ns.port == 7000


def test_plan_module_mode():
    ns, rest = parse(["--nproc-per-node", "2", "-m", "json.tool", "x"])
    plan = plan_torchrun(ns, rest)
    assert "-m" not in plan.torchrun_options
    assert plan.torchrun_args()[-5:] == ["-m", "rtdebug.rank.bootstrap", "-m", "json.tool", "x"]


def test_no_python_rejected(tmp_path):
    ns, rest = parse(["--no-python", "--nproc-per-node", "2", "echo"])
    with pytest.raises(Exception, match="--no-python is not supported"):
        plan_torchrun(ns, rest)


@pytest.mark.parametrize(
    "nnodes, node_rank, static, expect",
    [
        ("1", 0, True, ([0, 1], 0)),
        ("2", 1, True, ([2, 3], 1)),
        ("2", 0, False, ([0, 1, 2, 3], None)),
        ("1:3", 0, False, ([0, 1, 2, 3, 4, 5], None)),
    ],
)
def test_local_global_ranks(nnodes, node_rank, static, expect):
    assert local_global_ranks(2, nnodes, node_rank, static) == expect


def test_vscode_command_prints_configs(capsys):
    assert (
        cli.main(["vscode", "--script", "examples/plain_ddp.py", "--nproc-per-node", "2", "--port-base", "6000"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    names = [c["name"] for c in out["configurations"]]
    assert names[:2] == ["rtdebug: attach rank 0 (127.0.0.1:6000)", "rtdebug: attach rank 1 (127.0.0.1:6001)"]
    assert out["configurations"][1]["connect"] == {"host": "127.0.0.1", "port": 6001}
    assert out["compounds"][0]["preLaunchTask"] == out["tasks"][0]["label"]


def test_vscode_multinode_hosts(capsys):
    assert cli.main(["vscode", "--script", "t.py", "--nproc-per-node", "2", "--nnodes", "2", "--hosts", "a,b"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["connect"]["host"] for c in out["configurations"][:4]] == ["a", "a", "b", "b"]
    assert out["configurations"][3]["name"] == "rtdebug: attach rank 3 (b:5681)"
    assert cli.main(["vscode", "--script", "t.py"]) == 0
    default = json.loads(capsys.readouterr().out)["configurations"]
    assert [c["name"] for c in default[:2]] == ["rtdebug: attach rank 0", "rtdebug: attach rank 1"]
    assert default[0]["rules"] == [{"module": "rtdebug", "include": False}]
    assert cli.main(["vscode", "--script", "t.py", "--nnodes", "2", "--hosts", "a"]) == 2
    assert "--hosts lists 1 hosts for --nnodes 2" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["run", "torchrun"])
def test_generated_configs_run_the_rtdebug_module_only(mode, capsys):
    """A workspace's own harness/ must never be what a generated config runs (the package was renamed)."""
    assert cli.main(["vscode", "--script", "t.py", "--mode", mode]) == 0
    out = capsys.readouterr().out
    assert "harness" not in out
    assert '"rtdebug"' in out


@pytest.mark.parametrize("cmd", sorted(cli.COMMANDS))
def test_every_command_has_help(cmd, capsys):
    assert cli.main([cmd, "--help"]) == 0
    assert "usage:" in capsys.readouterr().out


def test_the_listing_names_every_command_with_its_summary(capsys):
    assert cli.main(["--help"]) == 0
    words = " ".join(capsys.readouterr().out.split())  # however argparse wraps the lines
    for name, (_, summary) in cli.COMMANDS.items():
        assert f" {name} {summary}" in words


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_each_command_module_owns_its_parser_options_and_run(name):
    import argparse
    import dataclasses
    import importlib

    from rtdebug.commands.options import Options

    module = importlib.import_module(cli.COMMANDS[name][0])
    assert issubclass(module.OPTIONS, Options) and dataclasses.is_dataclass(module.OPTIONS)
    assert callable(module.run)
    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    module.add_parser(sub, "the summary")
    assert list(sub.choices) == [name]  # the module adds its own command, under the table's name


def _modules_after(argv: list[str]) -> list[str]:
    """The rtdebug.commands / launcher modules and torch a fresh interpreter has loaded after ``rtdebug argv``."""
    import subprocess
    import sys

    code = (
        "import sys; from rtdebug import cli; cli.main(sys.argv[1:]); "
        "print(sorted(m for m in sys.modules if m.startswith(('rtdebug.commands.', 'rtdebug.launcher', 'torch'))))"
    )
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    return eval(r.stdout.strip().splitlines()[-1])


def test_only_the_command_that_runs_is_imported(tmp_path, monkeypatch):
    monkeypatch.setenv("RTDEBUG_REGISTRY_DIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RTDEBUG_STORE", raising=False)
    assert _modules_after(["--help"]) == []
    assert _modules_after(["ps"]) == ["rtdebug.commands.options", "rtdebug.commands.ps"]
    assert _modules_after(["stacks", "--timeout", "0"]) == ["rtdebug.commands.options", "rtdebug.commands.stacks"]


@pytest.mark.parametrize(
    "command, values, message",
    [
        ("stacks", {"timeout": 0}, "--timeout must be > 0 seconds, got 0"),
        ("stacks", {"history": 65}, "--history takes 1 to 64 collectives, got 65"),
        (
            "stacks",
            {"store": "a:1", "ray_address": "b:2"},
            "--store and --ray-address name two different jobs: give one",
        ),
        (
            "stacks",
            {"native": True, "store": "a:1"},
            "--native reads this machine's ranks with py-spy: not with --store",
        ),
        (
            "stacks",
            {"pid": 1, "ray_address": "b:2"},
            "--pid reads one process tree on this machine with py-spy: not with --ray-address",
        ),
        ("attach", {"rank": "0,1"}, "--rank '0,1': a rank number or mesh coordinates such as tp=1 or dp=0,tp=*"),
        ("adopt", {"list": True, "detach": "abc"}, "adopt --list takes no PID and no --detach"),
        ("vscode", {"script": "t.py", "nnodes": 0}, "--nproc-per-node and --nnodes must be >= 1"),
        ("vscode", {"script": "t.py", "nnodes": 2, "hosts": "a"}, "--hosts lists 1 hosts for --nnodes 2"),
    ],
)
def test_options_refuse_user_mistakes_in_one_usage_line(command, values, message):
    import importlib

    from rtdebug.common.errors import HarnessError

    with pytest.raises(HarnessError) as e:
        importlib.import_module(cli.COMMANDS[command][0]).OPTIONS(**values)
    assert e.value.message.startswith(message) and e.value.exit_code == 2


def test_options_come_from_the_namespace_in_one_place(monkeypatch):
    from rtdebug.commands.attach import AttachOptions
    from rtdebug.commands.stacks import StacksOptions
    from rtdebug.views.api import ViewOptions

    monkeypatch.setenv("RTDEBUG_STORE", "h:1")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ns = cli.build_parser("attach").parse_args(["attach", "--rank", "tp=1", "--timeout", "5"])
    assert AttachOptions.from_args(ns) == AttachOptions(rank="tp=1", timeout=5.0, views=ViewOptions(store="h:1"))
    ns = cli.build_parser("stacks").parse_args(["stacks", "--rank", "dp=0,tp=*", "--history"])
    assert StacksOptions.from_args(ns) == StacksOptions(rank="dp=0,tp=*", history=16)  # --store: only if given


def test_main_turns_errors_into_one_line_and_exit_codes(monkeypatch, capsys):
    from rtdebug.commands import ps
    from rtdebug.common.errors import HarnessError

    def fail(exc):
        def run(opts):
            raise exc

        return run

    monkeypatch.setattr(ps, "run", fail(HarnessError("it broke", 3)))
    assert cli.main(["ps"]) == 3
    assert capsys.readouterr().err == "rtdebug: error: it broke\n"
    monkeypatch.setattr(ps, "run", fail(KeyboardInterrupt()))
    assert cli.main(["ps"]) == 130
    assert cli.main(["bogus"]) == 2
    assert "rtdebug: error: argument COMMAND: invalid choice: 'bogus'" in capsys.readouterr().err


def test_usage_error_exit_code(capsys):
    assert cli.main(["attach"]) == 2
    assert "the following arguments are required: --rank" in capsys.readouterr().err


def test_rank_table_states():
    from rtdebug.registry.table import format_table, rank_state

    base = {"rank": 0, "local_rank": 0, "pid": 1, "host": "127.0.0.1", "port": 5678, "attach_count": 0, "wait": False}
    assert rank_state(dict(base, state="ready")) == "ready"
    assert rank_state(dict(base, state="ready", wait=True)) == "ready (waiting)"
    assert rank_state(dict(base, state="ready", attach_count=2)) == "ready (detached)"
    assert rank_state(dict(base, state="attached", attach_count=1)) == "attached"
    table = format_table([dict(base, state="ready")], "sid")
    assert table.splitlines()[1].split() == [
        "0",
        "0",
        "1",
        "127.0.0.1:5678",
        "ready",
        "rtdebug",
        "attach",
        "--session",
        "sid",
        "--rank",
        "0",
    ]


def test_nproc_gpu_without_cuda_is_a_usage_error(tmp_path):
    import torch

    from rtdebug.common.errors import HarnessError

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    script = tmp_path / "t.py"
    script.write_text("")
    ns, rest = parse(["--nproc-per-node", "gpu", str(script)])
    with pytest.raises(HarnessError) as e:
        plan_torchrun(ns, rest)
    assert str(e.value) == "--nproc-per-node gpu: Cuda is not available." and e.value.exit_code == 2
    ns, rest = parse(["--nproc-per-node", "cpu", str(script)])
    assert plan_torchrun(ns, rest).nproc_per_node == torch._utils.cpu_count()


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path):
    """`rtdebug vscode ... | head -1`: the pipe closes before the JSON is written; no BrokenPipeError trace."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    p = subprocess.Popen(
        [sys.executable, "-m", "rtdebug", "vscode", "--script", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # the reader is gone before anything is written
    err = p.stderr.read().decode()
    assert p.wait(60) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err
