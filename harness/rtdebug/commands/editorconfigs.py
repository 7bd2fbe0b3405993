"""``rtdebug attach --format``: one rank's attach configuration in the form another DAP client takes.

VS Code's (``--json``, ``rtdebug vscode``) stays in ``vsconfigs``. Each form here attaches to the rank's own
endpoint as to a debugpy server (``connect``: host and port); the text is what goes into that client's own
config, as ``docs/other-editors.md`` shows. Values are quoted for each language (Lua, Emacs Lisp, TOML,
JSON), so a host or session id can never become code there.
"""

from __future__ import annotations

import json

FORMATS = ("nvim-dap", "dape", "helix", "zed")


def _lua(text: str) -> str:
    """A Lua string literal: printable ASCII as is (but the quote and backslash), every other byte as ``\\ddd``."""
    out = []
    for b in text.encode():
        ch = chr(b)
        out.append(ch if 32 <= b < 127 and ch not in "\\'\"" else f"\\{b:03d}")
    return "'" + "".join(out) + "'"


def _elisp(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def nvim_dap(name: str, host: str, port: int) -> str:
    """A line for ``:lua``: nvim-dap-python's ``python`` adapter (or your own) connects to ``connect``."""
    return (
        f"require('dap').run({{ type = 'python', request = 'attach', name = {_lua(name)}, "
        f"connect = {{ host = {_lua(host)}, port = {int(port)} }}, justMyCode = true }})"
    )


def dape(name: str, host: str, port: int) -> str:
    """An entry for ``dape-configs``: no ``command``, so dape connects to ``host``:``port``."""
    key = "-".join("".join(c if c.isalnum() else " " for c in name).split())
    return (
        f"(add-to-list 'dape-configs '({key} modes (python-mode python-ts-mode) host {_elisp(host)} "
        f'port {int(port)} :request "attach" :type "python" :justMyCode t))'
    )


def helix(name: str, host: str, port: int) -> str:
    """A ``languages.toml`` debugger that reaches the rank through ``nc`` (Helix only starts adapters)."""
    return "\n".join(
        [
            "[[language]]",
            'name = "python"',
            "[language.debugger]",
            'name = "rtdebug"',
            'transport = "stdio"',
            'command = "nc"',
            f"args = [{json.dumps(host)}, {json.dumps(str(int(port)))}]",
            "[[language.debugger.templates]]",
            f"name = {json.dumps(name)}",
            'request = "attach"',
            "completion = []",
            "args = { justMyCode = true }",
        ]
    )


def zed(name: str, host: str, port: int) -> str:
    """An entry for ``.zed/debug.json``."""
    entry = {
        "label": name,
        "adapter": "Debugpy",
        "request": "attach",
        "connect": {"host": host, "port": int(port)},
        "justMyCode": True,
    }
    return json.dumps(entry, indent=2)


RENDER = {"nvim-dap": nvim_dap, "dape": dape, "helix": helix, "zed": zed}


def render(fmt: str, rank: int, session_id: str, host: str, port: int) -> str:
    return RENDER[fmt](f"rtdebug rank {rank} ({session_id})", host, port)
