"""Attach a real DAP client to every given endpoint at once (as VS Code's Attach to All Ranks), then detach.

    python connect_attach_all.py SCRIPT LINE HOST:PORT [HOST:PORT ...]
    python connect_attach_all.py --ready T0 REGISTRY N SCRIPT LINE

Prints one JSON line: ``elapsed`` (first connect -> every client's configurationDone answered). With
``--ready``: waits until the registry REGISTRY lists a session with N ready ranks and every one of them
answers a DAP client; ``elapsed`` is then from wall time T0 (connect's start) to that moment.
"""

import json
import sys
import threading
import time
from pathlib import Path

from support.dap import DAPClient  # tests/support: PYTHONPATH from the test that runs this (support_env)


def attach_all(script: str, line: int, endpoints: list[tuple[str, int]]) -> float:
    errors: list[str] = []
    start = time.monotonic()

    def one(host: str, port: int) -> None:
        try:
            c = DAPClient(host, port, timeout=60)
            c.attach({script: [line]})
            c.disconnect()
        except Exception as exc:  # reported, never hidden
            errors.append(f"{host}:{port}: {exc!r}")

    threads = [threading.Thread(target=one, args=e) for e in endpoints]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit("; ".join(errors))
    return time.monotonic() - start


def ready_ports(registry: Path, n: int) -> list[int] | None:
    for d in registry.iterdir() if registry.is_dir() else []:
        ranks = []
        for p in d.glob("rank-*.json"):
            try:
                ranks.append(json.loads(p.read_text()))
            except (OSError, ValueError):
                return None
        ready = [r["port"] for r in ranks if r.get("state") in ("ready", "attached")]
        if len(ready) >= n:
            return ready
    return None


if sys.argv[1] == "--ready":
    t0, registry, n, script, line = (
        float(sys.argv[2]),
        Path(sys.argv[3]),
        int(sys.argv[4]),
        sys.argv[5],
        int(sys.argv[6]),
    )
    while (ports := ready_ports(registry, n)) is None:
        time.sleep(0.01)
    attach_all(script, line, [("127.0.0.1", p) for p in ports])
    print(json.dumps({"elapsed": time.time() - t0}), flush=True)
else:
    script, line = sys.argv[1], int(sys.argv[2])
    eps = [(e.rsplit(":", 1)[0], int(e.rsplit(":", 1)[1])) for e in sys.argv[3:]]
    print(json.dumps({"elapsed": attach_all(script, line, eps)}), flush=True)
