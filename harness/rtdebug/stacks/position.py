"""One rank's place in the collective sequence, as the verdict reads it: a typed value with its source.

A ``Position`` comes from one of two sources, said by its ``source`` field: the collective record
(``rtdebug.registry.collseq``: the Python-level collectives rtdebug's wrapper saw, and the named ops
outside torch.distributed such as ``ray.train.report``) or torch's Flight Recorder
(``rtdebug.stacks.flight``: every collective, also those DDP and FSDP issue from C++). Only a
Flight Recorder position says who issued the collective (``issued``, ``by``, ``during``), how many
all-reduces the rank ran (``counts``, ``wrapped``) and the group's members. It never leaves the
process: the snapshot's JSON gets ``entry()``, and the verdict's text is made from these fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rtdebug.registry import collseq
from rtdebug.stacks import flight as flightrec

Source = Literal["record", "flight"]


@dataclass(eq=False, slots=True)
class Position:
    """Where one rank stands: the last collective it entered (``state`` entered) or returned from."""

    op: str
    seq: int
    state: str  # "entered" | "returned"
    source: Source
    pg: Any = None  # the process group's name (str), None where the record has none
    file: Any = None  # the call site's file and line; None where the source does not say
    line: Any = None
    func: Any = None
    line_text: str = "?"  # the line as the site says it ("?" where the record has no line key at all)
    desc: str = ""  # torch's description of the group (``mesh_tp`` for a DeviceMesh dimension's)
    issued: str | None = None  # Flight Recorder only: "python" (the record saw the call) or "torch"
    by: str | None = None  # who issued it from C++ ("DDP", "FSDP"), when torch did
    during: str | None = None  # what the rank was doing then ("backward()")
    counts: Any = None  # Flight Recorder only: {pg: {op: n}} over its window
    wrapped: Any = None  # whether its ring dropped entries (then a count says too little)
    members: set[int] | None = None  # the group's ranks, where the Flight Recorder names them

    @classmethod
    def of(cls, rec: Mapping[str, Any], source: Source) -> Position:
        """A record dict (``collseq.decode``'s, or ``flight.position``'s): only the keys each source has."""
        get = rec.get
        line = get("line", "?")
        pos = cls(rec["op"], rec["seq"], str(get("state")), source, get("pg"), get("file"), get("line"), get("func"))
        pos.line_text, pos.desc = str(line), str(get("desc") or "")
        if source == "flight":
            pos.issued, pos.by, pos.during = get("issued"), get("by"), get("during")
            pos.counts, pos.wrapped, pos.members = get("counts"), get("wrapped"), get("members")
        return pos

    # -- how the sequence is compared -----------------------------------------------------------------
    def key(self) -> tuple:
        return (self.pg, self.seq, self.op)

    def site_key(self) -> tuple:
        """An adopted job's ranks count collectives from their own injection, which may fall on either side
        of a collective: their numbers can differ by one for the same call, so op and call site decide."""
        return (self.pg, self.op, self.file, self.line)

    def place(self) -> tuple:
        """The same place in the same group, whatever the op."""
        return (self.pg, self.seq)

    @property
    def entered(self) -> bool:
        return self.state == "entered"

    @property
    def ddp(self) -> bool:
        """DDP's gradient all-reduce during ``backward()`` (issued from C++: the Flight Recorder's word)."""
        return self.by == "DDP" and self.during == "backward()" and self.op == "ALLREDUCE"

    def allreduces(self, pg: Any) -> int | None:
        """How many ALLREDUCE this rank's Flight Recorder holds on group ``pg`` (None: unknown)."""
        return flightrec.count({"counts": self.counts, "wrapped": self.wrapped}, pg, "ALLREDUCE")

    # -- how it is said -------------------------------------------------------------------------------
    def name(self) -> str:
        """``ALLREDUCE #812``: the op and its number in the group."""
        return collseq.name(self.op, self.seq)

    def where(self) -> str:
        """``ALLREDUCE #812 (train.py:42)``, as ``collseq.where`` says a record's collective."""
        return f"{self.name()} ({collseq.call_site(self.file, self.line_text)})"

    def mesh(self) -> str:
        """``mesh_tp`` when the group is a DeviceMesh dimension's (torch's description), else ""."""
        return self.desc if self.desc.startswith("mesh_") else ""

    def describe(self) -> str:
        """``ALLREDUCE #12 (train.py:22) issued by DDP during backward()``: the collective and who issued it
        when it was not the user's own call (the collective record did not see it)."""
        text = self.where()
        if self.mesh():  # a DeviceMesh's group: torch names it after its dimension
            text += f" on {self.mesh()}"
        if self.issued == "torch":
            text += f" issued by {self.by or 'torch'}" + (f" during {self.during}" if self.during else "")
        return text

    def entry(self, rank: int) -> dict[str, Any]:
        """The snapshot group's ``collectives`` entry (JSON): who issued it only where the Flight Recorder said."""
        out = {"op": self.op, "seq": self.seq, "state": self.state, "file": self.file, "line": self.line, "rank": rank}
        if self.source == "flight":
            out.update(pg=self.pg, issued=self.issued, by=self.by, during=self.during)
        return out


def position_text(pos: Position | None, pg: Any) -> str:
    """Where a rank stands in the sequence, said against the collective waited on (group ``pg``)."""
    if pos is None:
        return "before any collective"
    text = pos.name()
    if pos.pg != pg:
        text += f" of group {pos.pg}"
    return f"inside {text}" if pos.entered else f"after {text} returned"
