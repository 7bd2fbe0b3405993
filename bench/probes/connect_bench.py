"""``rtdebug connect``'s three goals on a 2-node, 8-rank c10d job, in network namespaces with real sshd's.

    bash scripts/bench.sh probes/connect_bench [--rounds 5] [--window 8]

The hosts are the e2e test's (tests/e2e/test_connect.py: ``lap`` reaches only ``login``; ``n0``, ``n1`` run the
job, 4 ranks each, tests/scripts/connect_steps.py: all_reduce as fast as it can). Measured:

1. connect -> every rank attachable: from the wall time ``rtdebug connect node0 --jump login`` is started
   to the moment every one of the 8 local ports answers a real DAP client's handshake (initialize, attach,
   a breakpoint, configurationDone; tests/scripts/connect_attach_all.py --ready). Goal <= 2 s.
2. attach-all through the tunnels vs on the node: the same 8 handshakes at once from the laptop through
   the tunnels, and from each node to its own 4 ranks (both nodes at once; the slower node counts);
   alternating order each round, after one warm-up round. Goal: ratio of medians <= 1.5.
3. the job's steps/s while connected and idle vs not connected, in alternating windows. Goal >= 0.99.

Needs root (network namespaces) and openssh-server/openssh-client (scripts/setup.sh). Writes
bench/results/DATE-connect.md (or ``--out FILE``); ``--only-connect`` measures goal 1 alone and prints it.

Result: bench/results/2026-12-06-connect.md and bench/results/2026-12-06-connect-speed.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from support.netns import sweep
from support.paths import PY, SCRIPTS, marker_line
from support.sshhosts import Cluster, connect_args, setup_ssh  # the e2e test's hosts
from support.wait import until

ROOT = Path(__file__).resolve().parents[2]

JOB = SCRIPTS / "connect_steps.py"
ATTACH = SCRIPTS / "connect_attach_all.py"
LINE = marker_line(JOB, "never")
NPROC = 4
RDZV_PORT = 29500


def log(msg: str) -> None:
    print(f"[connect-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def start_job(c: Cluster, work: Path, sleep: float) -> list[subprocess.Popen]:
    n0 = c.addr["n0"]
    procs = []
    for i, h in enumerate(("n0", "n1")):
        args = ["torchrun", "--nnodes=2", f"--nproc-per-node={NPROC}", f"--node_rank={i}", "--rdzv_backend=c10d",
                f"--rdzv_endpoint={n0}:{RDZV_PORT}", "--rdzv_id=job", f"--rdzv-conf=is_host={1 - i}",
                "--local-addr", c.addr[h], str(JOB), str(work), str(sleep)]  # fmt: skip
        procs.append(c.start(h, args, RTDEBUG_WARM_S="1"))
    until(lambda: len(ready(c)) == 2 * NPROC, 300, "8 ready ranks", every=1, context=c.trouble)
    return procs


def ready(c: Cluster) -> list[dict]:
    r = c.rtdebug("n0", "ps", "--json")
    if r.returncode != 0:
        return []
    return [x for s in json.loads(r.stdout)["sessions"] for x in s["ranks"] if x["state"] in ("ready", "attached")]


PHASES: dict[str, list[float]] = {}


def connect(c: Cluster, trace: bool = False, harness: str | None = None) -> subprocess.Popen:
    """``rtdebug connect node0 --jump login`` on the laptop; with ``trace``, its RTDEBUG_LOG=info step times
    (seconds since its start() began) are kept in PHASES when it ends (``disconnect``); ``harness``: the
    laptop runs the rtdebug package found there (PYTHONPATH) instead of this tree's."""
    argv = ["ip", "netns", "exec", c.names["lap"], PY, "-m", "rtdebug", *connect_args(c, "node0", "--jump", "login")]
    env = dict(c.env("lap"), RTDEBUG_LOG="info") if trace else c.env("lap")
    if harness:
        env["PYTHONPATH"] = harness
    err = subprocess.PIPE if trace else subprocess.DEVNULL
    # SIGINT as a terminal's Ctrl-C sends it, even when this bench runs as a shell's background job (`&`: SIGINT
    # ignored, and a Python started so never turns it into KeyboardInterrupt)
    reset = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True, preexec_fn=reset)


def disconnect(p: subprocess.Popen, phases: dict[str, list[float]] | None = None) -> None:
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        import psutil

        tree = [f"{q.pid} {q.status()} {' '.join(q.cmdline())[:160]}" for q in [psutil.Process(p.pid),
                *psutil.Process(p.pid).children(recursive=True)]]  # fmt: skip
        log("connect did not end within 60 s of SIGINT: " + " / ".join(tree))
        p.kill()
        raise
    for line in (err or "").splitlines():
        m = re.search(r"connect: (.+) at ([0-9.]+) s$", line)
        if m:
            keep = PHASES if phases is None else phases
            keep.setdefault(re.sub(r"link to \S+", "link to HOST", m.group(1)), []).append(float(m.group(2)))


def attach_time(c: Cluster, h: str, endpoints: list[str]) -> subprocess.Popen:
    argv = ["ip", "netns", "exec", c.names[h], PY, str(ATTACH), str(JOB), str(LINE), *endpoints]
    return subprocess.Popen(argv, env=c.env(h), stdout=subprocess.PIPE, text=True)


def elapsed(p: subprocess.Popen) -> float:
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 0, out
    return float(json.loads(out.strip().splitlines()[-1])["elapsed"])


BASELINE: list[float] = []  # connect -> attachable with --baseline's harness, in the rounds between
BASE_PHASES: dict[str, list[float]] = {}


def connect_time(c: Cluster, harness: str | None = None) -> float:
    reg = c.tmp / "registry-lap"
    # the last round's clients are gone: every rank is back to ready (debugpy takes one client at a time)
    until(lambda: sorted(x["state"] for x in ready(c)) == ["ready"] * 2 * NPROC, 60, "every rank ready")
    t0 = time.time()
    conn = connect(c, trace=True, harness=harness)
    probe = c.run("lap", PY, str(ATTACH), "--ready", str(t0), str(reg), str(2 * NPROC), str(JOB), str(LINE),
                  timeout=120)  # fmt: skip
    assert probe.returncode == 0, probe.stdout + probe.stderr
    took = float(json.loads(probe.stdout.strip().splitlines()[-1])["elapsed"])
    disconnect(conn, BASE_PHASES if harness else None)
    log(f"connect -> 8 attachable{' (baseline)' if harness else ''}: {took:.3f} s")
    return took


def connect_times(c: Cluster, rounds: int, baseline: str | None = None) -> list[float]:
    """``rounds`` timed connects, after one untimed (each rank's first DAP client starts debugpy's adapter);
    with ``baseline``, as many with that harness, in alternating order round by round."""
    connect_time(c)
    out = []
    for i in range(rounds):
        for base in (False, True) if i % 2 == 0 else (True, False):
            if not base:
                out.append(connect_time(c))
            elif baseline:
                BASELINE.append(connect_time(c, baseline))
    return out


def local_ports(c: Cluster) -> list[str]:
    r = c.rtdebug("lap", "ps", "--json")
    return [f"127.0.0.1:{x['port']}" for s in json.loads(r.stdout)["sessions"] for x in s["ranks"]]


def attach_rounds(c: Cluster, rounds: int) -> tuple[list[float], list[float]]:
    on_node = {h: [] for h in ("n0", "n1")}
    for x in ready(c):
        on_node["n1" if x.get("node_ip") == c.addr["n1"] else "n0"].append(f"127.0.0.1:{x['port']}")
    conn = connect(c)
    until(lambda: len(local_ports(c)) == 2 * NPROC, 60, "connected")
    tunnel_eps = local_ports(c)
    tunnel, node = [], []
    for i in range(rounds + 1):
        for kind in ("tunnel", "node") if i % 2 else ("node", "tunnel"):
            # the last round's clients are gone: every rank is back to ready (debugpy takes one client at a time)
            until(lambda: sorted(x["state"] for x in ready(c)) == ["ready"] * 2 * NPROC, 60, "every rank ready")
            if kind == "tunnel":
                t = elapsed(attach_time(c, "lap", tunnel_eps))
            else:
                ps = [attach_time(c, h, eps) for h, eps in on_node.items()]
                t = max(elapsed(p) for p in ps)
            if i:  # round 0 warms up (each rank's first client starts debugpy's adapter)
                (tunnel if kind == "tunnel" else node).append(t)
            log(f"attach-all {kind}: {t:.3f} s{'' if i else ' (warm-up)'}")
    disconnect(conn)
    return tunnel, node


def steps_at(work: Path) -> tuple[float, int]:
    t, n = (work / "steps").read_text().split()
    return float(t), int(n)


def rate(work: Path, window: float) -> float:
    t0, s0 = steps_at(work)
    time.sleep(window)  # the measurement window itself, not a wait for a state
    t1, s1 = steps_at(work)
    return (s1 - s0) / (t1 - t0)


IDLE_CPU: list[float] = []  # CPU share of one core: connect, its ssh children and every sshd, per window


def cpu_seconds(conn: subprocess.Popen) -> float:
    """CPU time so far of ``connect`` (its process and ssh children) and of every sshd of the test hosts."""
    import psutil

    top = psutil.Process(conn.pid)
    sshd = [p for p in psutil.process_iter(["name"]) if p.info["name"] == "sshd"]
    procs = [top, *top.children(recursive=True), *sshd]
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return total


def steps_windows(c: Cluster, work: Path, rounds: int, window: float) -> tuple[list[float], list[float]]:
    off, on = [], []
    for i in range(rounds):
        for connected in (False, True) if i % 2 == 0 else (True, False):
            conn = None
            if connected:
                conn = connect(c)
                until(lambda: len(local_ports(c)) == 2 * NPROC, 60, "connected")
                time.sleep(1)  # let connect settle into its idle refresh loop before the window
            before = cpu_seconds(conn) if conn is not None else 0.0
            (on if connected else off).append(rate(work, window))
            if conn is not None:
                IDLE_CPU.append((cpu_seconds(conn) - before) / window)
            log(f"steps/s {'connected' if connected else 'not connected'}: {(on if connected else off)[-1]:.1f}")
            if conn is not None:
                disconnect(conn)
    return on, off


def md(xs: list[float], d: int = 3) -> str:
    return f"{statistics.median(xs):.{d}f} (min {min(xs):.{d}f}, max {max(xs):.{d}f}, n={len(xs)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=8.0)
    ap.add_argument("--sleep", type=float, default=0.005, help="each rank sleeps this long after each step")
    ap.add_argument("--only-connect", action="store_true", help="measure goal 1 only (prints it, writes no file)")
    ap.add_argument("--out", metavar="FILE", help="where the result goes (default bench/results/DATE-connect.md)")
    ap.add_argument("--baseline", metavar="DIR", help="also time connect with the rtdebug package in DIR (e.g. "
                    "an older commit's harness/, from git archive), alternating with this tree's")  # fmt: skip
    args = ap.parse_args()
    sweep()
    tmp = Path(tempfile.mkdtemp(prefix="connect-bench-"))
    os.environ["XDG_CONFIG_HOME"] = str(tmp / "config")
    c = Cluster(tmp)
    load = [os.getloadavg()[0]]
    try:
        c.up()
        c.cluster_home.mkdir()
        c.lap_home.mkdir()
        c.cfg = setup_ssh(c)  # type: ignore[attr-defined]
        work = tmp / "work"
        work.mkdir()
        nodes = start_job(c, work, args.sleep)
        ct = connect_times(c, args.rounds, args.baseline)
        load.append(os.getloadavg()[0])
        if args.only_connect:
            phases = "; ".join(f"{k} {md(v)}" for k, v in PHASES.items())
            print(f"connect -> 8 attachable: {md(ct)} s; load {load}; {phases}")
            if BASELINE:
                phases = "; ".join(f"{k} {md(v)}" for k, v in BASE_PHASES.items())
                print(f"baseline {args.baseline}: {md(BASELINE)} s; {phases}")
            (work / "stop").write_text("")
            for p in nodes:
                p.wait(timeout=120)
            return 0
        tunnel, node = attach_rounds(c, args.rounds)
        load.append(os.getloadavg()[0])
        on, off = steps_windows(c, work, args.rounds, args.window)
        load.append(os.getloadavg()[0])
        (work / "stop").write_text("")
        for p in nodes:
            p.wait(timeout=120)
    finally:
        c.down()
    ratio = statistics.median(tunnel) / statistics.median(node)
    srat = statistics.median(on) / statistics.median(off)
    cores = os.cpu_count()
    yes = {True: "yes", False: "no"}
    row1 = f"| connect -> every rank of 8 attachable | {md(ct)} s | <= 2 s | {yes[statistics.median(ct) <= 2]} |"
    row2 = f"| attach-all through the tunnels / on the nodes | {ratio:.2f}x (tunnel {md(tunnel)} s, node {md(node)} s)"
    row2 += f" | <= 1.5x | {yes[ratio <= 1.5]} |"
    row3 = f"| steps/s connected and idle / not connected | {srat:.3f}x (connected {md(on, 1)}, not {md(off, 1)})"
    row3 += f" | >= 0.99x | {yes[srat >= 0.99]} |"
    phases = "\n".join(f"| {k} | {md(v)} |" for k, v in PHASES.items())
    if BASELINE:  # the same rounds with --baseline's harness, interleaved
        row1 += f"\n| the same with `--baseline {args.baseline}` (interleaved) | {md(BASELINE)} s | <= 2 s | "
        row1 += f"{yes[statistics.median(BASELINE) <= 2]} |"
        phases += "".join(f"\n| {k} (baseline) | {md(v)} |" for k, v in BASE_PHASES.items())
    text = f"""# rtdebug connect: 2 nodes x {NPROC} ranks through a jump host ({time.strftime("%Y-%m-%d")})

`bash scripts/bench.sh probes/connect_bench --rounds {args.rounds} --window {args.window:g} --sleep {args.sleep:g}`
(each rank sleeps {args.sleep:g} s after each all_reduce) on this machine
({cores} cores, shared; load average {", ".join(f"{x:.1f}" for x in load)} across the run). Hosts are network
namespaces on one bridge with real sshd's (tests/e2e/test_connect.py), so ssh's own cost is real and the
network's is nil.

| goal | measured | target | met |
|---|---|---|---|
{row1}
{row2}
{row3}

"attachable" is a real DAP handshake (initialize, attach, setBreakpoints, configurationDone) answered on
every local port, timed from the moment `rtdebug connect` is started (its Python start, both ssh masters,
the remote `rtdebug ps --json`, the secret read and the forwards included). Attach-all is the same
handshake to all 8 at once; on the nodes, each node's 4 ranks from that node, both nodes at once (the
slower counts). Steps/s: rank 0's own count over {args.window:g} s windows, connected and not in turn;
while connected and idle, `connect` reads the job's store through its forward every 1 s (the tests'
`--refresh 1`; the default is 3 s: nothing runs on a node for it).

While connected and idle, `connect`, its ssh masters and every sshd of the hosts together used
{md([x * 100 for x in IDLE_CPU], 2)} % of one core (CPU time over each connected window), so the
steps/s ratio's spread is this shared machine's, not connect's.

Where connect's time goes (RTDEBUG_LOG=info; seconds from the start of its work, after its own Python
start, to the end of each step; the secret is read while the other node's link opens):

| step | at (s) |
|---|---|
{phases}
"""
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"{time.strftime('%Y-%m-%d')}-connect.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
