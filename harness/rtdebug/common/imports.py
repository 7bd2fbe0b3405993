"""Post-import hooks: run a fix the moment a module is first imported.

rtdebug must patch torch's default process-group timeout and check Ray's V2
switch, but importing torch or ray itself in a lazy rank would cost seconds the
user's script may pay later anyway. A meta-path finder runs the callback right
after the module executes, or at once if it is already imported.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

_hooks: dict[str, list[Callable]] = {}


class _Finder:
    """A meta-path finder (``find_spec`` is all the import system asks of one); not an
    ``importlib.abc`` subclass, whose import pulls importlib.resources into every rank."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module, _original=original, _name=fullname):
            _original(module)
            for cb in _hooks.pop(_name, []):
                cb(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # per-spec loader instance, on purpose
        return spec


_finder = _Finder()


def when_imported(name: str, callback: Callable) -> None:
    if name in sys.modules:
        callback(sys.modules[name])
        return
    _hooks.setdefault(name, []).append(callback)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def cancel(name: str, callback: Callable) -> None:
    """Forget a hook that has not run yet (an adopted rank's detach: nothing of rtdebug may fire later)."""
    pending = _hooks.get(name, [])
    if callback in pending:
        pending.remove(callback)
    if not pending:
        _hooks.pop(name, None)
    if not _hooks and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
