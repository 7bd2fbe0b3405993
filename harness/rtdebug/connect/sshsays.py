"""What ssh and a job's node say, read with care: ssh's errors in one line (``explain``), ``ssh -G``'s
settings, a remote command's output bounded as it comes (``read_bounded``), and the checks ``rtdebug connect``
makes of a node address a listing names (``listed_node_problem``). Pure functions and pipes: no connection."""

from __future__ import annotations

import os
import re
import selectors
import shlex
import subprocess
import time
from pathlib import Path


def last_line(text: str) -> str:
    """ssh's own reason, in one line: its last line that says something (no warnings about known hosts)."""
    lines = [ln.strip() for ln in text.replace("\r", "\n").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("Warning: Permanently added")]
    keep = "".join(ch if ch.isprintable() else "?" for ch in (lines[-1] if lines else ""))
    return keep[:300]


# what ssh (or a jump host's sshd, "channel 0: open failed: connect failed: ...") says when no sshd answered
# the node: most telling first (a jump host's own refusal is "administratively prohibited", told apart above)
UNREACHABLE = (
    "connect failed",
    "connect to host",
    "connection refused",
    "no route to host",
    "network is unreachable",
    "host is unreachable",
    "connection timed out",
    "kex_exchange_identification",
    "connection closed by",
    "connection reset",
)


def _line_with(text: str, needle: str) -> str:
    return next((last_line(ln) for ln in text.splitlines() if needle in ln.lower()), last_line(text))


def explain(stderr: str, node: str, jumps: list[str], hop_forwards: bool | None = None) -> str:
    """Why ssh could not reach ``node`` (a jump host's own ssh writes there too), in one line a user can act on;
    ``hop_forwards``: whether the last jump host was seen to forward a connection (None: not known)."""
    low = stderr.lower()
    via = f" through {','.join(jumps)}" if jumps else ""
    if "could not resolve hostname" in low:
        return f"cannot reach {node}{via}: {_line_with(stderr, 'could not resolve hostname')}"
    if "permission denied" in low:
        why = _line_with(stderr, "permission denied")
        return f"{node}{via} refused the login ({why}); check the key ssh uses for it (ssh -v {node})"
    hop = jumps[-1] if jumps else node
    refused = f"jump host {hop} refused to forward the connection to {node} (sshd: AllowTcpForwarding no?)"
    down = f"cannot connect to {node}{via}: it is down or no sshd listens there"
    if "administratively prohibited" in low or (hop_unknown(stderr) and hop_forwards is False):
        hint = "administratively prohibited" if "administratively prohibited" in low else "stdio forwarding"
        return f"{refused}: {_line_with(stderr, hint)}"
    if hop_unknown(stderr) and hop_forwards:  # the jump host forwards: its connect to the node failed
        return f"{down} ({_line_with(stderr, 'stdio forwarding')})"
    if hop_unknown(stderr) and hop_forwards is None:  # either: ssh does not say which
        return f"{refused}, or {node} is down or has no sshd listening: {_line_with(stderr, 'stdio forwarding')}"
    if "host key verification failed" in low:
        return f"{node}: host key verification failed; connect once with plain ssh to check and record its key"
    said = next((m for m in UNREACHABLE if m in low), None)
    if said is not None:  # the node (or, with -J, the hop's own connect to it) got no ssh server's answer
        return f"{down} ({_line_with(stderr, said)})"
    return f"cannot connect to {node}{via}: {last_line(stderr) or 'ssh exited'}"


MAX_STDERR = 64 << 10  # bytes of a remote command's stderr kept (its last ones: ssh's reason comes last)
PLAIN_WORD = re.compile(r"[A-Za-z0-9_.=:-]{1,64}")


def read_bounded(proc: subprocess.Popen, timeout: float, limit: int) -> tuple[bytes, bytes, str]:
    """``proc``'s stdout (at most ``limit`` bytes) and the end of its stderr, read as they come, until both
    close: ``(out, err, "")``, or ``"big"`` once stdout passes ``limit``, ``"timeout"`` after ``timeout``."""
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for pipe, buf in ((proc.stdout, out), (proc.stderr, err)):
            if pipe is not None:
                sel.register(pipe, selectors.EVENT_READ, buf)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(out), bytes(err), "timeout"
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                key.data.extend(chunk)
                if key.data is out and len(out) > limit:
                    return b"", bytes(err), "big"
                if key.data is err and len(err) > MAX_STDERR:
                    del err[: len(err) - MAX_STDERR]
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return bytes(out), bytes(err), "timeout"
    return bytes(out), bytes(err), ""


def command_label(argv: list[str]) -> str:
    """A remote command as a user knows it: ``rtdebug ps --json``, not the launcher words before ``ps``
    (``python -m rtdebug``, a venv path, ``python -c ...``)."""
    at = [k for k, a in enumerate(argv) if os.path.basename(a) == "rtdebug"]
    rest = argv[at[-1] + 1 :] if at else []
    if not at:
        for a in reversed(argv[1:]):
            if not PLAIN_WORD.fullmatch(a):
                break
            rest.insert(0, a)
    return " ".join(["rtdebug", *rest])[:120]


def first_bytes(proc: subprocess.Popen, timeout: float, n: int) -> bytes:
    """The first ``n`` bytes ``proc`` prints (fewer: it closed its stdout, or ``timeout`` passed)."""
    got = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
        while len(got) < n and (left := deadline - time.monotonic()) > 0:
            if not sel.select(left):
                break
            chunk = os.read(proc.stdout.fileno(), n - len(got))  # type: ignore[union-attr]
            if not chunk:
                break
            got += chunk
    return got


def hop_unknown(stderr: str) -> bool:
    """ssh says a ``-J`` hop's channel failed, and not why (its jump ssh logs the reason only with ``-v``)."""
    low = stderr.lower()
    return "stdio forwarding failed" in low and not any(m in low for m in ("administratively", "connect failed"))


def refused_by_mux(stderr: str) -> bool:
    """A node master's log says the jump master's mux could not open the hop (and not why)."""
    return "stdio forwarding request failed" in stderr.lower()


def ssh_settings(ssh_g: str) -> dict[str, str]:
    """``ssh -G``'s output as settings (its keys lower case; the first of a repeated one)."""
    conf: dict[str, str] = {}
    for ln in ssh_g.splitlines():
        key, _, value = ln.partition(" ")
        conf.setdefault(key.lower(), value.strip())
    return conf


def listed_node_problem(node: str, conf: dict[str, str], plain: dict[str, str]) -> str:
    """Why a listed ``node``'s ``ssh -G`` settings ``conf`` are not those of a plain address ("" when they
    are): a HostName other than itself, or a proxy other than the one ``plain`` (a name no Host entry of its
    own matches: the jump hosts connect sets, a ``Host *`` proxy of the user's) gets."""
    hostname = conf.get("hostname", "")
    if hostname.lower() != node.lower():
        return f"your ssh config makes it HostName {hostname[:80]!r} (an alias: name hosts yourself, as HOST)"
    for key, shown in (("proxycommand", "ProxyCommand"), ("proxyjump", "ProxyJump")):
        value = conf.get(key, "none")
        if value != plain.get(key, "none"):
            return f"your ssh config gives it a {shown} of its own ({value[:80]!r})"
    return ""


def user_has_master(ssh_g: str) -> bool:
    """From ``ssh -G HOST``'s output: does the user's config give HOST a ControlMaster (and a ControlPath)?"""
    conf = ssh_settings(ssh_g)
    master = conf.get("controlmaster", "false").strip().lower()
    path = conf.get("controlpath", "none").strip().lower()
    return master not in ("false", "no") and path not in ("", "none")


def proxy_command(ssh: str, config: list[str], control: Path, jump: str) -> str:
    """``ProxyCommand`` through the running master at ``control`` to ``jump``: a mux client, no handshake. Its
    words are quoted for the shell ssh runs it with, and ``%`` doubled (ssh expands ``%h`` and ``%p`` only)."""
    words = [ssh, *config, "-S", str(control), "-o", "ControlMaster=no", "-o", "BatchMode=yes"]
    quoted = " ".join(shlex.quote(w).replace("%", "%%") for w in words)
    return f"{quoted} -W '[%h]:%p' -- {shlex.quote(jump).replace('%', '%%')}"
