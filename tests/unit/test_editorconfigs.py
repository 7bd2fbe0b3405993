"""``rtdebug attach --format``: each client's text names the rank's address, and a forged host or name can
never become code in that client's language (Lua, Emacs Lisp, TOML, JSON)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import tomllib

from rtdebug.commands import editorconfigs

from support.paths import PY, ROOT

HOSTILE = "127.0.0.1'\"]} os.execute('x') \\\n\x01é"


def test_each_format_names_the_rank_and_its_address():
    out = {f: editorconfigs.render(f, 1, "20261207-113000-ab12", "127.0.0.1", 5679) for f in editorconfigs.FORMATS}
    assert out["nvim-dap"] == (
        "require('dap').run({ type = 'python', request = 'attach', name = 'rtdebug rank 1 (20261207-113000-ab12)', "
        "connect = { host = '127.0.0.1', port = 5679 }, justMyCode = true })"
    )
    assert out["dape"].startswith("(add-to-list 'dape-configs '(rtdebug-rank-1-20261207-113000-ab12 modes ")
    assert 'host "127.0.0.1" port 5679 :request "attach"' in out["dape"]
    helix = tomllib.loads(out["helix"])["language"][0]["debugger"]
    assert helix["command"] == "nc" and helix["args"] == ["127.0.0.1", "5679"]
    assert helix["templates"][0]["request"] == "attach"
    assert json.loads(out["zed"])["connect"] == {"host": "127.0.0.1", "port": 5679}


def test_a_forged_host_stays_a_string():
    helix = tomllib.loads(editorconfigs.helix("n", HOSTILE, 1))["language"][0]["debugger"]
    assert helix["args"][0] == HOSTILE
    assert json.loads(editorconfigs.zed("n", HOSTILE, 1))["connect"]["host"] == HOSTILE
    lua = editorconfigs.nvim_dap("n", HOSTILE, 1)
    literal = re.search(r"host = '((?:[^'\\]|\\\d{3})*)'", lua).group(1)  # one Lua string, only \ddd escapes
    assert re.sub(rb"\\(\d{3})", lambda m: bytes([int(m.group(1))]), literal.encode()).decode() == HOSTILE
    elisp = editorconfigs.dape("n", HOSTILE, 1)
    assert re.sub(r"\\.", "", elisp, flags=re.S).count('"') == 6  # host's, attach's, python's: no other


def test_format_and_json_together_is_one_line():
    r = subprocess.run([PY, "-m", "rtdebug", "attach", "--rank", "1", "--json", "--format", "zed"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2
    assert r.stderr == (
        "rtdebug: error: --json prints VS Code's configuration and --format zed another client's: pick one\n"
    )


@pytest.mark.parametrize("bad", ["--port=70000", "--ranks=x="])
def test_dap_bad_options_are_one_line(bad):
    r = subprocess.run([PY, "-m", "rtdebug", "dap", bad], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("rtdebug: error: ")
