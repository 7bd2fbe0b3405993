"""rtdebug's own warnings read ``rtdebug: warning: ...``; every other warning in the process (``rtdebug run``
runs the user's script in it) keeps Python's format and its filters (``rtdebug.common.warns``)."""

from __future__ import annotations

import inspect
import warnings

import pytest

from rtdebug import cli
from rtdebug.common import warns


@pytest.fixture(autouse=True)
def python_format(monkeypatch):
    """Each test starts from Python's own format, put back after it (``install`` replaces it process-wide).
    pytest records warnings itself, so these tests call the format as ``warnings`` does when it prints one;
    ``tests/e2e/test_run_warnings.py`` sees a real script's printed."""
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        yield


def test_ours_read_rtdebug_warning_and_the_scripts_keep_category_file_and_line():
    python = warnings.formatwarning("my own deprecation", UserWarning, "/w/train.py", 7, "warn()")
    assert python == "/w/train.py:7: UserWarning: my own deprecation\n  warn()\n"
    warns.install()
    warns.install()  # once per process: a second main() adds no second layer
    fmt = warnings.formatwarning
    assert fmt("debug endpoints bind 0.0.0.0", warns.RtdebugWarning, "/r/config.py", 3, "x") == (
        "rtdebug: warning: debug endpoints bind 0.0.0.0\n"
    )
    assert fmt("my own deprecation", UserWarning, "/w/train.py", 7, "warn()") == python
    assert fmt("old", DeprecationWarning, "/w/train.py", 8, None).startswith("/w/train.py:8: DeprecationWarning: old")


def test_main_installs_it():
    assert cli.main(["ps", "--help"]) == 0
    assert getattr(warnings.formatwarning, "__rtdebug__", False)
    assert warnings.formatwarning("x", UserWarning, "/w/t.py", 1, None).startswith("/w/t.py:1: UserWarning: x")


def test_ours_are_warned_in_rtdebugs_category_from_the_caller():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        warns.warn("ours", stacklevel=1)
    assert [(w.category, str(w.message), w.filename, w.lineno) for w in seen] == [
        (warns.RtdebugWarning, "ours", __file__, line)
    ]


def test_the_scripts_filters_decide_and_never_turn_ours_into_errors():
    warns.install()
    warnings.simplefilter("error", UserWarning)  # a script's, or -W error::UserWarning
    with pytest.raises(UserWarning, match="my own deprecation"):
        warnings.warn("my own deprecation", UserWarning, stacklevel=1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("always", warns.RtdebugWarning)
        warns.warn("ours")  # not a UserWarning: still a warning, not an error
    assert [(w.category, str(w.message)) for w in seen] == [(warns.RtdebugWarning, "ours")]
