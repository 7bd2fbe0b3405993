"""Import every rtdebug module, subpackages included; print which failed (torch/Ray missing counts as optional).

Run by tests/project/test_pythons.py with each .venv-3.X's python."""

import importlib
import json
import pkgutil

import rtdebug

failed, optional = {}, []
for m in pkgutil.walk_packages(rtdebug.__path__, "rtdebug."):
    if m.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(m.name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in ("torch", "ray"):  # the extras: not installed here
            optional.append(m.name)
        else:
            failed[m.name] = repr(exc)
    except Exception as exc:
        failed[m.name] = repr(exc)
print(json.dumps({"file": rtdebug.__file__, "failed": failed, "optional": optional}))
