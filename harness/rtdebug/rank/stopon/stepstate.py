"""``nonfinite``'s state in a rank, as one typed object (``STATE``): what it knows of the job's models, held
weakly, and what this backward found (``ddp`` writes it, ``agree`` reads it after backward).

A model's parameters and modules are known by identity, and only while they live (``WeakIdMap``): when a
model is gone its names go with it, so a later model whose parameter lands at the same address (the same
``id()``) is never given a dead one's name. ``weakref.WeakKeyDictionary`` would not do: a tensor compares
elementwise, and a module may define ``__eq__`` (and so have no hash).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class WeakIdMap(Generic[V]):
    """object -> value by identity, holding the object weakly: its entry goes when it does, and a lookup
    finds an entry only for the very object it was made for."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], V]] = {}

    def __setitem__(self, obj: Any, value: V) -> None:
        key, entries = id(obj), self._entries

        def gone(ref: weakref.ref[Any]) -> None:  # the object died: its entry (if still its own) goes
            if (entry := entries.get(key)) is not None and entry[0] is ref:
                del entries[key]

        entries[key] = (weakref.ref(obj, gone), value)

    def get(self, obj: Any, default: Any = None) -> Any:
        entry = self._entries.get(id(obj))
        return entry[1] if entry is not None and entry[0]() is obj else default

    def __contains__(self, obj: Any) -> bool:
        entry = self._entries.get(id(obj))
        return entry is not None and entry[0]() is obj

    def pop(self, obj: Any, default: Any = None) -> Any:
        if obj not in self:
            return default
        return self._entries.pop(id(obj))[1]

    def keys(self) -> Iterator[Any]:
        """The objects still alive, in the order they were added."""
        for ref, _ in list(self._entries.values()):
            if (obj := ref()) is not None:
                yield obj

    def __len__(self) -> int:
        return sum(1 for ref, _ in list(self._entries.values()) if ref() is not None)


@dataclass(slots=True)
class Backward:
    """One backward, from ``agree.begin`` to ``agree.end`` (each gradient's hook adds to it)."""

    pre: list[tuple[Any, Any]] = field(default_factory=list)  # (parameter, or None: FSDP's input; its flag)
    saved: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # id(p) -> (p, its element 0's own value)
    carry: Any = False  # what the first gradient's element 0 carries: the loss's flag (True: a pending finding)
    carries: bool = False  # DDP's own reduction carries the findings (``reduction.carries``)
    sync: Any = None  # DDP's group if this backward synchronises; False: no_sync; None: no DDP forward
    fsdp: tuple[Any] | None = None  # (the group FSDP2 reduce-scattered over) when it did, this backward
    deep: str | None = None  # nonfinite:deep -- the first module whose output went non-finite
    model: Any = None  # the DDP module that ran this backward's forward
    active: bool = False  # inside a ``Tensor.backward`` of ours (``torch.autograd.backward``: unchecked)

    def begin(self, carry: Any) -> None:
        self.pre, self.saved, self.fsdp, self.active, self.carry = [], {}, None, True, carry

    def reset(self) -> None:
        """Nothing of this backward is kept (after ``agree.end``, or when the job's backward raised)."""
        self.pre, self.saved, self.sync, self.fsdp, self.deep = [], {}, None, None, None
        self.carry, self.model, self.active = False, None, False


@dataclass
class State:
    """What ``nonfinite`` knows in this rank. Per model and parameter: held weakly. ``group`` is the process
    group of the job's last DDP module; ``step`` the backward under way."""

    names: WeakIdMap[tuple[str, int]] = field(default_factory=WeakIdMap)  # parameter -> (its name, its place)
    modules: WeakIdMap[str] = field(default_factory=WeakIdMap)  # module -> its qualified name (deep)
    params: WeakIdMap[bool] = field(default_factory=WeakIdMap)  # parameters whose gradients are checked
    of_model: WeakIdMap[list[Any]] = field(default_factory=WeakIdMap)  # DDP module -> its watched parameters
    builtin_hooked: WeakIdMap[bool] = field(default_factory=WeakIdMap)  # DDP modules with a C++ comm hook
    group: Any = None  # the process group of the job's last DDP module (its ranks hold replicas)
    fsdp_seen: bool = False  # FSDP2 reduce-scattered in some backward: a backward with none is a micro-batch's
    pending: tuple[str, str] | None = None  # a no_sync micro-batch's finding (what, where), for the step's sync
    micro: int = 0  # the micro-batch's index under no_sync
    armed: bool = False  # nonfinite is in force (``ddp.enable``): the hooks stay in, idle when not
    deep_hooked: bool = False  # nonfinite:deep's global forward hook is in
    step: Backward = field(default_factory=Backward)


STATE = State()
