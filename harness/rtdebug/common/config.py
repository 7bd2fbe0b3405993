"""Validated configs for each stage; the launcher hands RankConfig to ranks via env vars.

Checks live in ``__post_init__`` so a bad value fails before anything starts,
with the same one-line message whether it came from a flag or the environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rtdebug.common import selector, stopon, warns
from rtdebug.common.addresses import LOOPBACK, parse_allow
from rtdebug.common.errors import usage
from rtdebug.common.ports import DEFAULT_PORT_BASE, MAX_PORT, parse_rank_list
from rtdebug.common.rankenv import DEFAULT_PG_TIMEOUT_S

DEFAULT_POST_MORTEM_WAIT_S = 600.0
# Keep rtdebug's own frames (bootstrap, runpy glue, the collective wrapper) out of call stacks and stepping, even
# when it is installed inside the workspace (editable install), where justMyCode alone would show them: in the
# configurations rtdebug writes, and added by each rank's relay to an attach that names no rule for rtdebug
HIDE_HARNESS = [{"module": "rtdebug", "include": False}]
RAY_LOCAL_MODES = ("cluster", "ray")  # --ray-local-mode
RAY_LOCAL_MODE_VAR = "RTDEBUG_RAY_LOCAL_MODE"
WORKER_PORT_BASE_VAR = "RTDEBUG_WORKER_PORT_BASE"  # Ray Train workers' port base (rtdebug run)
LAUNCH_VAR = "RTDEBUG_CAPTURE_LAUNCH"  # the launch facts a capturing rank writes into the capsule's manifest
REPLAY_SCRATCH_VAR = "RTDEBUG_REPLAY_SCRATCH"  # a replay's scratch folder (set in the replaying process too)
ALL_STOP_VAR, CONTINUE_ALL_VAR = "RTDEBUG_ALL_STOP", "RTDEBUG_CONTINUE_ALL"  # the job's all-stop (rank.allstop)


def switch_on(env: Mapping[str, str], name: str) -> bool:
    """An on/off variable that is on unless set to 0, false, no or off (``RTDEBUG_ALL_STOP``, ...)."""
    return env.get(name, "1").strip().lower() not in ("0", "false", "no", "off")


def check_host(host: str) -> None:
    if host not in LOOPBACK:
        warns.warn(
            f"debug endpoints bind {host}: whoever they let in (your uid here, allow-listed machines) can run code",
            stacklevel=3,
        )


@dataclass(frozen=True)
class LaunchFacts:
    """What only the launcher knows of a captured job, for the capsule's manifest (``rtdebug replay`` reruns it)."""

    mode: str  # "torchrun" or "run"
    script: str  # absolute path, or the module name when ``module``
    module: bool
    argv: list[str]  # the script's own arguments
    cwd: str  # absolute
    nnodes: str
    nproc_per_node: int
    torchrun_options: list[str]
    session_id: str

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LaunchFacts:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"{LAUNCH_VAR} is not a JSON object")
        return cls(**data)


@dataclass(frozen=True)
class ReplayTarget:
    """``rtdebug replay``: the rank a capsule replays, as the shell found it (``rtdebug.commands.replay``), for
    the one-process launcher (``rtdebug.launcher.single``): that rank's environment and working directory."""

    capsule: str  # absolute
    rank: int
    world_size: int
    env: dict[str, str]  # the rank's recorded torchrun / Ray Train variables (RANK, WORLD_SIZE, LOCAL_RANK, ...)
    cwd: str
    scratch: str  # checkpoints and Ray Train storage go here
    check: bool = True
    tolerance: float = 0.0
    stop_at: int = 0
    runs: str = ""  # what runs (script or -m module, and its arguments), as a shell would read it


@dataclass
class RankConfig:
    """What every rank's bootstrap needs; round-trips through ``RTDEBUG_*`` variables."""

    session_id: str
    port_base: int = DEFAULT_PORT_BASE
    host: str = "127.0.0.1"
    allow: str = ""  # remote peers allowed in (ADDR|CIDR,...); "" = this host's own addresses
    wait: str = "none"
    eager: bool = False
    post_mortem: bool = False
    post_mortem_wait_s: float = DEFAULT_POST_MORTEM_WAIT_S
    pg_timeout_s: float = DEFAULT_PG_TIMEOUT_S
    registry_dir: str | None = None
    force_local: bool = False
    check_collectives: bool = False  # TORCH_DISTRIBUTED_DEBUG=DETAIL for the ranks
    hang_report_s: float | None = None  # launcher only; None = rtdebug.launcher.hangwatch.default_hang_s
    stop_on: str = ""  # --stop-on conditions (rtdebug.common.stopon), "" = off
    all_stop: bool = True  # --no-all-stop: one rank stops alone (rtdebug.rank.allstop)
    continue_all: bool = True  # --no-continue-all: a continue continues that rank only
    ray_local_mode: str = "cluster"  # --ray-local-mode: "cluster" (the cluster's semantics) or "ray" (Ray's own)
    capture_dir: str = ""  # --capture DIR: the capsule's folder (absolute), "" = off
    capture_ranks: str = ""  # --capture-ranks: "" = every rank, else rank numbers (0,2-3)
    capture_max_gb: float = 0.0  # --capture-max-gb: 0 = no bound
    launch: LaunchFacts | None = None  # with capture_dir: what the launcher knows of the job (the manifest's)
    replay_dir: str = ""  # rtdebug replay: the capsule served to this rank, "" = off
    replay_check: bool = True  # --no-check turns it off
    replay_tolerance: float = 0.0  # --check-tolerance
    replay_stop_at: int = 0  # --stop-at-collective K (from 1), 0 = off
    replay_scratch: str = ""  # where a replay's checkpoints and Ray Train storage go
    wait_ranks: frozenset[int] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= self.port_base <= MAX_PORT:
            raise usage(f"--debug-port-base {self.port_base} must be within 1-{MAX_PORT}")
        if self.pg_timeout_s <= 0:
            raise usage(f"--pg-timeout must be > 0 seconds, got {self.pg_timeout_s:g}")
        if self.post_mortem_wait_s < 0:
            raise usage("--post-mortem-wait must be >= 0 seconds")
        if self.hang_report_s is not None and self.hang_report_s < 0:
            raise usage(f"--hang-report must be >= 0 seconds (0 = off), got {self.hang_report_s:g}")
        try:
            parse_allow(self.allow)
        except ValueError as exc:
            raise usage(f"--debug-allow/--allow: {exc}") from None
        if selector.is_mesh(self.wait):  # --wait tp=1: ranks wait once the job's DeviceMesh places them
            selector.parse(self.wait, "--wait")
            self.wait_ranks = frozenset()
        else:
            self.wait_ranks = parse_rank_list(self.wait)
        if self.ray_local_mode not in RAY_LOCAL_MODES:
            raise usage(f"--ray-local-mode must be one of {', '.join(RAY_LOCAL_MODES)}, got {self.ray_local_mode!r}")
        self.stop_on = stopon.parse(self.stop_on).text()  # a bad condition fails here, before anything starts
        self._check_replay()

    def _check_replay(self) -> None:
        """The capture and replay settings: each alone, and the combinations that mean nothing."""
        if not self.capture_dir and (self.capture_ranks or self.capture_max_gb):
            flag = "--capture-ranks" if self.capture_ranks else "--capture-max-gb"
            raise usage(f"{flag} needs --capture DIR")
        if self.capture_max_gb < 0 or self.capture_max_gb != self.capture_max_gb:
            raise usage(f"--capture-max-gb must be >= 0 GB (0: no limit), got {self.capture_max_gb:g}")
        if self.capture_ranks:
            capture_rank_set(self.capture_ranks)
        if self.capture_dir and self.replay_dir:
            raise usage("a replay cannot capture: --capture and rtdebug replay do not go together")
        if not 0 <= self.replay_tolerance < float("inf"):
            raise usage(f"--check-tolerance must be a number >= 0, got {self.replay_tolerance:g}")
        if self.replay_stop_at < 0:
            raise usage(f"--stop-at-collective must be >= 1 (numbered from 1), got {self.replay_stop_at}")

    def waits(self, rank: int) -> bool:
        return self.wait_ranks is None or rank in self.wait_ranks

    def to_env(self) -> dict[str, str]:
        env = {
            "RTDEBUG_SESSION": self.session_id,
            "RTDEBUG_PORT_BASE": str(self.port_base),
            "RTDEBUG_HOST": self.host,
            "RTDEBUG_ALLOW": self.allow,
            "RTDEBUG_WAIT": self.wait,
            "RTDEBUG_EAGER": "1" if self.eager else "0",
            "RTDEBUG_POST_MORTEM": "1" if self.post_mortem else "0",
            "RTDEBUG_POST_MORTEM_WAIT": repr(self.post_mortem_wait_s),
            "RTDEBUG_PG_TIMEOUT": repr(self.pg_timeout_s),
        }
        if self.registry_dir:
            env["RTDEBUG_REGISTRY_DIR"] = self.registry_dir
        if self.force_local:
            env["RTDEBUG_FORCE_LOCAL"] = "1"
        if self.check_collectives:
            env["RTDEBUG_CHECK_COLLECTIVES"] = "1"
            env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"  # torch checks every collective's op/shape across ranks
        if self.hang_report_s is not None:
            env["RTDEBUG_HANG_REPORT"] = repr(self.hang_report_s)
        if self.stop_on:
            env[stopon.ENV] = self.stop_on
        for name, on in ((ALL_STOP_VAR, self.all_stop), (CONTINUE_ALL_VAR, self.continue_all)):
            if not on:  # only the flag's "off": else the job's own environment says (on unless it says 0)
                env[name] = "0"
        env[RAY_LOCAL_MODE_VAR] = self.ray_local_mode
        env.update(self._replay_env())
        return env

    def _replay_env(self) -> dict[str, str]:
        env = {}
        if self.capture_dir:
            env["RTDEBUG_CAPTURE"] = self.capture_dir
            env["RTDEBUG_CAPTURE_RANKS"] = self.capture_ranks
            env["RTDEBUG_CAPTURE_MAX_GB"] = repr(self.capture_max_gb)
            if self.launch is not None:
                env[LAUNCH_VAR] = self.launch.to_json()
        if self.replay_dir:
            env["RTDEBUG_REPLAY"] = self.replay_dir
            env["RTDEBUG_REPLAY_CHECK"] = "1" if self.replay_check else "0"
            env["RTDEBUG_REPLAY_TOLERANCE"] = repr(self.replay_tolerance)
            env["RTDEBUG_REPLAY_STOP_AT"] = str(self.replay_stop_at)
            env[REPLAY_SCRATCH_VAR] = self.replay_scratch
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RankConfig:
        env = os.environ if env is None else env
        if "RTDEBUG_SESSION" not in env:
            raise usage("rtdebug.rank.bootstrap runs inside `rtdebug torchrun`; RTDEBUG_SESSION is not set")
        try:
            return cls(
                session_id=env["RTDEBUG_SESSION"],
                port_base=int(env.get("RTDEBUG_PORT_BASE", DEFAULT_PORT_BASE)),
                host=env.get("RTDEBUG_HOST", "127.0.0.1"),
                allow=env.get("RTDEBUG_ALLOW", ""),
                wait=env.get("RTDEBUG_WAIT", "none"),
                eager=env.get("RTDEBUG_EAGER") == "1",
                post_mortem=env.get("RTDEBUG_POST_MORTEM") == "1",
                post_mortem_wait_s=float(env.get("RTDEBUG_POST_MORTEM_WAIT", DEFAULT_POST_MORTEM_WAIT_S)),
                pg_timeout_s=float(env.get("RTDEBUG_PG_TIMEOUT", DEFAULT_PG_TIMEOUT_S)),
                registry_dir=env.get("RTDEBUG_REGISTRY_DIR"),
                force_local=env.get("RTDEBUG_FORCE_LOCAL") == "1",
                check_collectives=env.get("RTDEBUG_CHECK_COLLECTIVES") == "1",
                hang_report_s=float(env["RTDEBUG_HANG_REPORT"]) if env.get("RTDEBUG_HANG_REPORT") else None,
                stop_on=env.get(stopon.ENV, ""),
                all_stop=switch_on(env, ALL_STOP_VAR),
                continue_all=switch_on(env, CONTINUE_ALL_VAR),
                ray_local_mode=env.get(RAY_LOCAL_MODE_VAR, "cluster"),
                **_replay_from_env(env),
            )
        except (ValueError, TypeError) as exc:
            raise usage(f"bad RTDEBUG_* setting: {exc}") from None


def _replay_from_env(env: Mapping[str, str]) -> dict[str, Any]:
    launch = env.get(LAUNCH_VAR)
    return {
        "capture_dir": env.get("RTDEBUG_CAPTURE", ""),
        "capture_ranks": env.get("RTDEBUG_CAPTURE_RANKS", ""),
        "capture_max_gb": float(env.get("RTDEBUG_CAPTURE_MAX_GB") or 0.0),
        "launch": LaunchFacts.from_json(launch) if launch else None,
        "replay_dir": env.get("RTDEBUG_REPLAY", ""),
        "replay_check": env.get("RTDEBUG_REPLAY_CHECK", "1") != "0",
        "replay_tolerance": float(env.get("RTDEBUG_REPLAY_TOLERANCE") or 0.0),
        "replay_stop_at": int(env.get("RTDEBUG_REPLAY_STOP_AT") or 0),
        "replay_scratch": env.get(REPLAY_SCRATCH_VAR, ""),
    }


def capture_rank_set(text: str, world_size: int | None = None) -> frozenset[int] | None:
    """``--capture-ranks``: rank numbers (``0,2-3``) or ``all`` (None). Mesh coordinates are refused: a
    rank's place in a DeviceMesh is known only after its first collectives, which the capture must hold."""
    if selector.is_mesh(text):
        raise usage(
            f"--capture-ranks {text!r}: use rank numbers (0,2-3) or all; mesh coordinates are known "
            "only after capture has begun"
        )
    ranks = parse_rank_list(text or "all", world_size, flag="--capture-ranks")
    if ranks is not None and not ranks:
        raise usage(f"--capture-ranks {text!r} selects no rank: leave --capture out instead")
    return ranks


@dataclass
class Target:
    """The user's program: a script path or ``-m module``, and its argv."""

    target: str
    args: list[str] = field(default_factory=list)
    module: bool = False

    def __post_init__(self) -> None:
        if self.module:
            if not self.target or self.target.startswith("-"):
                raise usage(f"invalid module name {self.target!r}")
            return
        if not os.path.isfile(self.target):
            raise usage(f"script not found: {self.target}")
        if not os.access(self.target, os.R_OK):
            raise usage(f"script not readable: {self.target}")

    @property
    def display(self) -> str:
        return f"-m {self.target}" if self.module else self.target


@dataclass(frozen=True, kw_only=True)
class DebugOptions:
    """The debug options ``rtdebug run``, ``torchrun`` and ``replay`` share (the shell's ``debug_options``
    group: same names as its argparse destinations), as the launcher reads them. ``rank_config`` is the one
    place a ``RankConfig`` is made from a command's options."""

    port: int
    host: str
    allow: str
    eager: bool
    post_mortem: bool
    post_mortem_wait: float
    pg_timeout: float
    stop_on: str
    force_local: bool
    ray_local_mode: str = "cluster"
    all_stop: bool = True
    continue_all: bool = True
    capture: str | None = None
    capture_max_gb: float | None = None

    def rank_config(
        self,
        session_id: str,
        *,
        host: str,
        wait: str,
        check_collectives: bool = False,
        hang_report_s: float | None = None,
        capture_ranks: str = "",
        replay: ReplayTarget | None = None,
    ) -> RankConfig:
        """The ranks' config: ``host`` as resolved (torchrun's ``auto``), ``wait`` as a rank list; ``replay``:
        the capsule ``rtdebug replay`` serves to its one rank."""
        return RankConfig(
            session_id=session_id,
            port_base=self.port,
            host=host,
            allow=self.allow,
            wait=wait,
            eager=self.eager,
            post_mortem=self.post_mortem,
            post_mortem_wait_s=self.post_mortem_wait,
            pg_timeout_s=self.pg_timeout,
            force_local=self.force_local,
            check_collectives=check_collectives,
            hang_report_s=hang_report_s,
            stop_on=self.stop_on,
            all_stop=self.all_stop,
            continue_all=self.continue_all,
            ray_local_mode=self.ray_local_mode,
            capture_dir=self.capture or "",
            capture_ranks=capture_ranks,
            capture_max_gb=self.capture_max_gb or 0.0,
            **(_replay_fields(replay) if replay is not None else {}),
        )


def _replay_fields(replay: ReplayTarget) -> dict[str, Any]:
    return {
        "replay_dir": replay.capsule,
        "replay_check": replay.check,
        "replay_tolerance": replay.tolerance,
        "replay_stop_at": replay.stop_at,
        "replay_scratch": replay.scratch,
    }


@dataclass(frozen=True, kw_only=True)
class SingleRunOptions(DebugOptions):
    """What the one-process launcher (``rtdebug.launcher.single``) reads: ``rtdebug run``'s options (the
    shell's ``RunOptions`` is this class), or those ``rtdebug replay`` makes for its rank."""

    target: str
    args: list[str]
    module: bool
    wait: bool
    debug_port_base: int | None = None
    ray_address: str | None = None


@dataclass(frozen=True, kw_only=True)
class TorchrunDebugOptions(DebugOptions):
    """``rtdebug torchrun``'s own options (the debug group and its torchrun-only ones), taken out of the
    namespace of torchrun's parser that also holds them, for the launcher (``rtdebug.launcher.start``)."""

    wait_ranks: str
    check_collectives: bool
    hang_report: float | None = None
    capture_ranks: str | None = None
