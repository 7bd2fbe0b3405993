"""The lazy endpoint in a real process: no debugpy before attach, breakpoints after, re-attach works."""

import subprocess
import sys
import textwrap

import pytest

from conftest import port_free
from dap import DAPClient

pytestmark = pytest.mark.e2e

PROGRAM = textwrap.dedent('''
    import sys, time
    from harness.endpoint import Endpoint
    ep = Endpoint("127.0.0.1", int(sys.argv[1]), on_state=lambda s: print("STATE", s, flush=True))
    ep.start()
    print("DEBUGPY_LOADED", "debugpy" in sys.modules, flush=True)
    def work(i):
        x = i * 2  # line 8
        return x
    for i in range(2000):
        work(i)
        time.sleep(0.01)
''')


def test_lazy_then_attach_detach_reattach(tmp_path, port_base):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    log = open(tmp_path / "out.log", "w+")
    p = subprocess.Popen([sys.executable, str(script), str(port_base)], stdout=log, stderr=subprocess.STDOUT)
    try:
        for attempt in range(2):
            c = DAPClient("127.0.0.1", port_base)
            c.attach({str(script): [8]})
            stopped = c.wait_stopped(30)
            frame = c.top_frame(stopped["threadId"])
            assert frame["line"] == 8
            assert int(c.evaluate("x if 'x' in dir() else i", frame["id"])) >= 0
            c.request("setBreakpoints", source={"path": str(script)}, breakpoints=[])
            c.continue_(stopped["threadId"])
            c.disconnect()
        log.seek(0)
        out = log.read()
        assert "DEBUGPY_LOADED False" in out
        assert out.count("STATE attached") == 2
    finally:
        p.kill()
        p.wait()
    assert port_free(port_base)
