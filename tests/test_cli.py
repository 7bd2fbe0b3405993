import json

import pytest

from rtdebug import cli
from rtdebug.commands.options import split_our_options
from rtdebug.launcher.torchrun import local_global_ranks, plan_torchrun


def parse(tokens):
    ours, rest = split_our_options(tokens)
    return cli.torchrun_parser().parse_args(ours + rest), rest


def test_split_our_options_keeps_torchrun_flags_untouched():
    ours, rest = split_our_options(
        ["--wait", "0", "--eager", "--pg-timeout=5", "--nproc-per-node", "2", "--tee", "3", "train.py", "--wait", "x"]
    )
    assert ours == ["--wait", "0", "--eager", "--pg-timeout=5"]
    assert rest == ["--nproc-per-node", "2", "--tee", "3", "train.py", "--wait", "x"]


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


@pytest.mark.parametrize("cmd", ["run", "torchrun", "ps", "attach", "stop", "vscode"])
def test_every_command_has_help(cmd, capsys):
    assert cli.main([cmd, "--help"]) == 0
    assert "usage:" in capsys.readouterr().out


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
