"""Import every harness module; print which failed (torch/Ray missing counts as optional).

Run by tests/test_pythons.py with each .venv-3.X's python."""

import importlib
import json
import pkgutil

import harness

failed, optional = {}, []
for m in pkgutil.iter_modules(harness.__path__):
    if m.name == "__main__":
        continue
    try:
        importlib.import_module("harness." + m.name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in ("torch", "ray"):  # the extras: not installed here
            optional.append(m.name)
        else:
            failed[m.name] = repr(exc)
    except Exception as exc:
        failed[m.name] = repr(exc)
print(json.dumps({"file": harness.__file__, "failed": failed, "optional": optional}))
