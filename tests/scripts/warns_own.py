"""A script's own warnings, as ``python`` prints them: ``warns_own.py [error]``.

Without an argument it warns twice (a ``UserWarning`` and a ``DeprecationWarning``, which Python shows for
``__main__`` by default) and prints ``done``. With ``error`` it sets ``simplefilter("error", UserWarning)``
itself, as ``-W error::UserWarning`` would, and warns: the warning is raised.
"""

import sys
import warnings

if sys.argv[1:] == ["error"]:
    warnings.simplefilter("error", UserWarning)
warnings.warn("my own deprecation", UserWarning)  # noqa: B028  WARN SITE: user
warnings.warn("an old api", DeprecationWarning)  # noqa: B028  WARN SITE: deprecation
print("done", flush=True)
