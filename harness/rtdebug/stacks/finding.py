"""The verdict as a value: what the collective positions say (``Verdict``), and its one line (``render``).

``rtdebug.stacks.verdict.decide`` finds it; nothing else builds its text. A rank named alone gets its mesh
coordinates at its first mention (``rank 5 (pp=1, tp=1)``); a collective is said by its ``Position``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rtdebug.stacks.group import ranks_word
from rtdebug.stacks.position import Position, position_text

Kind = Literal["all_in", "never_entered", "crossed", "stalemate", "ahead"]


@dataclass(frozen=True)
class Side:
    """Ranks that stand alike outside the collective waited on (a stalemate says each side)."""

    ranks: list[int]
    at: Position | None  # the collective they are inside, or (None) where the first of them stands
    stands: Position | None = None  # ``at`` None: the first rank's own position (before any, or returned)


@dataclass(frozen=True)
class Cycle:
    """Ranks inside a subgroup's collective wait for its members that are not, who wait for them in turn."""

    waiting: list[int]  # inside the subgroup's collective
    at: Position
    group: str  # ``mesh_tp`` or ``group 3``
    members: list[int]
    missing: list[int]  # the members not inside it: they wait in the collective the rest are in


@dataclass
class Verdict:
    """Who the others wait for. ``kind``: ``all_in`` (every rank is in the same collective: no culprit),
    ``never_entered`` (``missing`` never entered the collective ``waiting`` are in), ``crossed`` (the culprit
    is in another op at the same place of the same group), ``stalemate`` (the records name nobody), ``ahead``
    (``missing`` are past the collective ``waiting`` are in: read at different moments, so nobody is named)."""

    kind: Kind
    waited: Position  # the collective the most ranks are in (op, seq, group, call site)
    waiting: list[int]  # the ranks inside it
    missing: list[int] = field(default_factory=list)  # the ranks that are not
    culprit: int | None = None
    culprit_at: Position | None = None  # where the culprit stands (None: before any collective)
    culprit_label: str = "?"  # its stack group's label
    uneven: tuple[int, int] | None = None  # crossed under DDP: (the culprit's ALLREDUCE count, the others')
    ddp_uneven: bool = False  # crossed in DDP's gradient all-reduce during backward(): say the usual cause
    sides: list[Side] = field(default_factory=list)  # stalemate: where every other rank stands
    blocked: bool = False  # stalemate: every other rank is inside some collective
    cycle: Cycle | None = None
    coords: dict[int, str] = field(default_factory=dict)  # mesh coordinates, said at a rank's first mention

    @property
    def op(self) -> str:
        return self.waited.op

    @property
    def seq(self) -> int:
        return self.waited.seq

    @property
    def group(self) -> Any:
        return self.waited.pg

    def render(self) -> str:
        """The verdict's one line."""
        return _Line(self.coords).verdict(self)


class _Line:
    """The words of one verdict: each rank named alone is given its mesh coordinates at its first mention."""

    def __init__(self, coords: dict[int, str]) -> None:
        self.coords, self.said = coords, set[int]()

    def ranks(self, ranks: list[int]) -> str:
        text = ranks_word(ranks)
        if len(ranks) == 1 and ranks[0] not in self.said:
            self.said.add(ranks[0])
            if ranks[0] in self.coords:
                text += f" ({self.coords[ranks[0]]})"
        return text

    def rank(self, rank: int) -> str:
        return self.ranks([rank])

    def verdict(self, v: Verdict) -> str:
        wait = "waits" if len(v.waiting) == 1 else "wait"
        if v.kind == "all_in":
            if len(v.waiting) > 1:
                return f"all {len(v.waiting)} ranks are in {v.waited.where()}"
            return f"{self.rank(v.waiting[0])} is in {v.waited.where()}"
        if v.kind == "crossed":
            assert v.culprit is not None and v.culprit_at is not None
            text = (
                f"{self.rank(v.culprit)} is in {v.culprit_at.describe()}, which {self.ranks(v.waiting)} never "
                f"entered: {'it' if len(v.waiting) == 1 else 'they'} {wait} in {v.waited.describe()}"
            )
            return text + self.uneven(v)
        if v.kind == "ahead":
            went = "has" if len(v.missing) == 1 else "have"
            return (
                f"no rank named: {self.ranks(v.missing)} {went} already left {v.waited.describe()}, which "
                f"{self.ranks(v.waiting)} {'is' if len(v.waiting) == 1 else 'are'} in "
                f"({self.rank(v.missing[0]) + ' is' if len(v.missing) > 1 else 'it is'} "
                f"{position_text(v.culprit_at, v.group)}): the ranks were read at different moments"
            )
        if v.kind == "never_entered":
            assert v.culprit is not None
            if v.op.startswith("ray.train"):  # an op outside torch: its name and number say it
                return f"{self.ranks(v.missing)} never entered {v.waited.name()}; {self.ranks(v.waiting)} {wait} in it"
            text = f"{self.ranks(v.missing)} never entered {v.waited.describe()}: "
            text += "it" if len(v.missing) == 1 else self.rank(v.culprit)
            text += f" is in {v.culprit_label}, {position_text(v.culprit_at, v.group)}"
            return text + f"; {self.ranks(v.waiting)} {wait} in it"
        return self.stalemate(v)

    def uneven(self, v: Verdict) -> str:
        if not v.ddp_uneven or v.culprit is None:
            return ""
        said = ""
        if v.uneven is not None:
            said = f"; {self.rank(v.culprit)} ran {v.uneven[0]} ALLREDUCE, {self.ranks(v.waiting)} ran {v.uneven[1]}"
        return (
            f"{said}. Usual cause: uneven inputs under DDP ({self.rank(v.culprit)} has more batches): wrap the loop in "
            "DDP's join() context manager, or shard the data evenly (DistributedSampler(drop_last=True))"
        )

    def stalemate(self, v: Verdict) -> str:
        parts = [f"{self.ranks(v.waiting)} in {v.waited.describe()}"]
        for side in v.sides:
            if side.at is None:
                parts.append(f"{self.ranks(side.ranks)} {position_text(side.stands, v.group)}")
            else:
                other = side.at.pg != v.group and not side.at.mesh()
                parts.append(f"{self.ranks(side.ranks)} in {side.at.describe()}{f' of group {side.at.pg}' * other}")
        head = "ranks are blocked in different collectives" if v.blocked else "no rank named"
        return f"{head}: " + "; ".join(parts) + self.cycle(v)

    def cycle(self, v: Verdict) -> str:
        c = v.cycle
        if c is None:
            return ""
        waits = "waits" if len(c.waiting) == 1 else "wait"
        text = f". {self.ranks(c.waiting)} {waits} in {c.at.where()} of {c.group} ({self.ranks(c.members)}) for "
        text += f"{self.ranks(c.missing)}, which "
        text += f"{'waits' if len(c.missing) == 1 else 'wait'} for {self.ranks(c.waiting)} in {v.waited.where()}: "
        text += f"{self.ranks(c.missing)} skipped {c.at.name()} of {c.group}, "
        return text + f"or {self.ranks(c.waiting)} entered it out of turn"
