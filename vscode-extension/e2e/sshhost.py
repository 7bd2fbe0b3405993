"""The "other machine" of the VS Code connect e2e (connectFlow.js): a real sshd and a 2-rank job behind it.

    python sshhost.py --dir D --home H --alias A --script S [--port-base B] [-- script args]

Makes its own host key, user key, authorized_keys and known_hosts under D, starts ``sshd -D`` bound to
127.0.0.1 on a free port (its own config; never the system's sshd, never the real ~/.ssh), and writes
H/.ssh/config with a ``Host A`` entry for it (IdentityFile, UserKnownHostsFile, Port, StrictHostKeyChecking
yes). Then starts ``rtdebug torchrun --nproc-per-node 2 --wait all S`` with a registry and config dir of its
own (D/registry, D/config: what sshd's sessions see too), so the job is not in the workbench's registry.
Prints one JSON line when both answer ({"ready": true, ...}), one when the job ends ({"job_exit": N}), and
ends the job (its process group) and sshd (its process group: the listener and its per-connection children),
by pid, when stdin closes or on SIGTERM. Its helpers (ports, process groups, waits) are the tests' own,
``tests/support``: connectFlow.js runs it with ``tests`` on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from support.ports import free_port
from support.procs import end_group
from support.wait import until

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=60)
    return Path(f"{path}.pub").read_text().strip()


def write_ssh(d: Path, home: Path, alias: str, port: int) -> None:
    """Keys, sshd's config, and the client side: known_hosts and H/.ssh/config."""
    host_pub = keygen(d / "host_key")
    (d / "authorized_keys").write_text(keygen(d / "id") + "\n")
    (d / "authorized_keys").chmod(0o600)
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    env = f"RTDEBUG_REGISTRY_DIR={d / 'registry'} XDG_CONFIG_HOME={d / 'config'} PYTHONUNBUFFERED=1"
    if os.environ.get("PYTHONPATH"):
        env += f" PYTHONPATH={os.environ['PYTHONPATH']}"
    (d / "sshd.conf").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\nPidFile none\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nStrictModes no\nUsePAM no\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"AllowTcpForwarding yes\nSetEnv {env}\nLogLevel ERROR\n"
    )
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh_dir / "config").write_text(
        "# the connect e2e's hosts: a decoy first, then the job's machine\n"
        "Host rtd-e2e-decoy\n  HostName 127.0.0.2\n  Port 9\n"
        f"Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {getpass.getuser()}\n"
        f"  IdentityFile {d / 'id'}\n  IdentitiesOnly yes\n  UserKnownHostsFile {d / 'known_hosts'}\n"
        "  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n"
    )
    (ssh_dir / "config").chmod(0o600)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, type=Path)
    ap.add_argument("--home", required=True, type=Path)
    ap.add_argument("--alias", required=True)
    ap.add_argument("--script", required=True)
    ap.add_argument("--port-base", type=int, default=0)
    ap.add_argument("args", nargs="*")
    a = ap.parse_args()
    d = a.dir.resolve()
    d.mkdir(mode=0o700, parents=True)
    (d / "registry").mkdir(mode=0o700)
    (d / "config").mkdir(mode=0o700)
    port = free_port()
    write_ssh(d, a.home.resolve(), a.alias, port)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    sshd_log = open(d / "sshd.log", "wb")
    sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd.conf")], stdout=sshd_log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    job: subprocess.Popen | None = None
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        probe = ["ssh", "-F", str(a.home / ".ssh" / "config"), a.alias, "true"]
        until(
            lambda: sshd.poll() is None and subprocess.run(probe, capture_output=True, timeout=30).returncode == 0,
            60,
            "sshhost: sshd answers",
        )
        job = start_job(a, d)
        sessions = [p.name for p in (d / "registry").iterdir() if (p / "session.json").exists()]
        emit(
            {
                "ready": True,
                "alias": a.alias,
                "port": port,
                "sshd_pid": sshd.pid,
                "job_pid": job.pid,
                "sessions": sessions,
            }
        )
        threading.Thread(target=until_eof, args=(done,), daemon=True).start()
        threading.Thread(target=report_exit, args=(job,), daemon=True).start()
        done.wait()
    finally:
        if job is not None:
            end_group(job)
        end_group(sshd)


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def until_eof(done: threading.Event) -> None:
    """The flow closes our stdin when it is done (or dies): then everything ends."""
    sys.stdin.read()
    done.set()


def report_exit(job: subprocess.Popen) -> None:
    job.wait()
    emit({"job_exit": job.returncode})


def start_job(a: argparse.Namespace, d: Path) -> subprocess.Popen:
    env = dict(
        os.environ, RTDEBUG_REGISTRY_DIR=str(d / "registry"), XDG_CONFIG_HOME=str(d / "config"), PYTHONUNBUFFERED="1"
    )
    env.pop("RTDEBUG_JOB_SECRET", None)
    cmd = [sys.executable, "-m", "rtdebug", "torchrun", "--wait", "all"]
    if a.port_base:
        cmd += ["--debug-port-base", str(a.port_base)]
    cmd += ["--nproc-per-node", "2"]
    job = subprocess.Popen([*cmd, a.script, *a.args], cwd=Path(a.script).parent, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    ready = threading.Event()
    log = open(d / "job.log", "w")

    def tee() -> None:
        for line in job.stdout:  # type: ignore[union-attr]
            log.write(line.decode(errors="replace"))
            log.flush()
            if line.startswith(b"rtdebug: all 2 local ranks ready"):
                ready.set()

    threading.Thread(target=tee, daemon=True).start()
    until(lambda: ready.is_set() or job.poll() is not None, 180, "sshhost: the job's 2 ranks ready")
    if not ready.is_set():
        raise SystemExit(
            f"sshhost: the job ended (exit {job.returncode}) before its ranks were ready; see {d / 'job.log'}"
        )
    return job


if __name__ == "__main__":
    main()
