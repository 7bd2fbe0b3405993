"""A small real DAP client over TCP (Content-Length framed JSON), for end-to-end tests.

It speaks to whatever listens on a rank's port exactly as VS Code would: the
lazy relay, debugpy's adapter or pydevd's in-process adapter.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any


class DAPError(AssertionError):
    pass


class DAPClient:
    def __init__(self, host: str, port: int, timeout: float = 60.0) -> None:
        self.timeout = timeout
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.create_connection((host, port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.sock.settimeout(None)
        self._seq = 0
        self._messages: list[dict[str, Any]] = []
        self._cv = threading.Condition()
        self._closed = False
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    # -- wire ---------------------------------------------------------------
    def _read_loop(self) -> None:
        f = self.sock.makefile("rb")
        try:
            while True:
                length = None
                while True:
                    line = f.readline()
                    if not line:
                        raise EOFError
                    line = line.strip()
                    if not line:
                        break
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        length = int(v)
                body = f.read(length)
                msg = json.loads(body)
                with self._cv:
                    self._messages.append(msg)
                    self._cv.notify_all()
        except (EOFError, OSError, ValueError):
            with self._cv:
                self._closed = True
                self._cv.notify_all()

    def send(self, command: str, **arguments: Any) -> int:
        self._seq += 1
        msg = {"seq": self._seq, "type": "request", "command": command, "arguments": arguments}
        data = json.dumps(msg).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(data) + data)
        return self._seq

    def _wait(self, pred, what: str, timeout: float | None) -> dict[str, Any]:
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cv:
            while True:
                for i, m in enumerate(self._messages):
                    if pred(m):
                        return self._messages.pop(i)
                if self._closed:
                    raise DAPError(f"connection closed while waiting for {what}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DAPError(f"timed out waiting for {what}")
                self._cv.wait(left)

    def response(self, seq: int, timeout: float | None = None) -> dict[str, Any]:
        m = self._wait(
            lambda m: m.get("type") == "response" and m.get("request_seq") == seq, f"response to request {seq}", timeout
        )
        if not m.get("success"):
            raise DAPError(f"{m.get('command')} failed: {m.get('message')}")
        return m.get("body") or {}

    def request(self, command: str, timeout: float | None = None, **arguments: Any) -> dict[str, Any]:
        return self.response(self.send(command, **arguments), timeout)

    def reverse_request(self, command: str, timeout: float | None = None) -> dict[str, Any]:
        """The next request the server sent us (a reverse request such as ``startDebugging``), whole."""
        wanted = f"reverse request {command!r}"
        return self._wait(lambda m: m.get("type") == "request" and m.get("command") == command, wanted, timeout)

    def answer(self, request: dict[str, Any], success: bool = True, message: str = "") -> None:
        """Respond to a reverse request, as a client does."""
        self._seq += 1
        msg = {"seq": self._seq, "type": "response", "request_seq": request["seq"], "command": request["command"],
               "success": success, **({"message": message} if message else {})}  # fmt: skip
        data = json.dumps(msg).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(data) + data)

    def pending(self, kind: str) -> list[dict[str, Any]]:
        """Messages of ``kind`` (request, event) received and not yet taken."""
        with self._cv:
            return [m for m in self._messages if m.get("type") == kind]

    def attach_job(self, start_debugging: bool = True, client_id: str = "rtdebug-tests", **config: Any) -> int:
        """initialize (announcing ``startDebugging`` or not) -> attach, to a job's DAP endpoint; the attach's seq."""
        caps = {"supportsStartDebuggingRequest": True} if start_debugging else {}
        self.request("initialize", adapterID="debugpy", clientID=client_id, pathFormat="path",
                     linesStartAt1=True, columnsStartAt1=True, **caps)  # fmt: skip
        return self.send("attach", **config)

    def event(self, name: str, timeout: float | None = None) -> dict[str, Any]:
        return (
            self._wait(lambda m: m.get("type") == "event" and m.get("event") == name, f"event {name!r}", timeout).get(
                "body"
            )
            or {}
        )

    # -- the attach sequence debugpy expects --------------------------------
    def attach(
        self,
        breakpoints: dict[str, list[int]] | None = None,
        just_my_code: bool = True,
        exception_filters: list[str] | None = None,
        **config: Any,
    ) -> dict[str, dict]:
        """initialize -> attach -> initialized -> setBreakpoints -> configurationDone.

        Returns the setBreakpoints bodies per file (their ``verified`` flags).
        """
        self.request(
            "initialize",
            adapterID="debugpy",
            clientID="rtdebug-tests",
            pathFormat="path",
            linesStartAt1=True,
            columnsStartAt1=True,
        )
        attach_seq = self.send("attach", **{"justMyCode": just_my_code, "name": "test attach", **config})
        self.event("initialized")
        verified = {}
        for path, lines in (breakpoints or {}).items():
            verified[path] = self.request(
                "setBreakpoints", source={"path": path}, breakpoints=[{"line": n} for n in lines]
            )
        self.request("setExceptionBreakpoints", filters=exception_filters or [])
        self.request("configurationDone")
        self.response(attach_seq)
        return verified

    def wait_stopped(self, timeout: float | None = None) -> dict[str, Any]:
        return self.event("stopped", timeout)

    def stopped_for(self, reason: str, timeout: float | None = None) -> dict[str, Any]:
        """The first ``stopped`` event with this reason; the ones before it (other reasons) are taken too."""
        while True:
            body = self.wait_stopped(timeout)
            if body.get("reason") == reason:
                return body

    def frames(self, thread_id: int) -> list[dict[str, Any]]:
        return self.request("stackTrace", threadId=thread_id)["stackFrames"]

    def top_frame(self, thread_id: int) -> dict[str, Any]:
        return self.request("stackTrace", threadId=thread_id, startFrame=0, levels=1)["stackFrames"][0]

    def evaluate(self, expression: str, frame_id: int) -> str:
        return self.request("evaluate", expression=expression, frameId=frame_id, context="repl")["result"]

    def continue_(self, thread_id: int) -> None:
        self.request("continue", threadId=thread_id)

    def disconnect(self) -> None:
        try:
            self.request("disconnect", timeout=10, terminateDebuggee=False)
        except DAPError:
            pass
        self.close()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # the reader's makefile() keeps the fd open
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def stop_in_each_rank(clients: dict[int, DAPClient], script: str, line: int, rank_expr: str) -> None:
    """Each client stops at ``script:line`` on a breakpoint, where ``rank_expr`` is its rank; then the
    breakpoint is cleared and the rank continues (the clients stay attached)."""
    for rank, c in clients.items():
        stopped = c.wait_stopped(120)
        assert stopped["reason"] == "breakpoint"
        frame = c.top_frame(stopped["threadId"])
        assert frame["line"] == line
        assert c.evaluate(rank_expr, frame["id"]) == str(rank)
        c.request("setBreakpoints", source={"path": script}, breakpoints=[])
        c.continue_(stopped["threadId"])
