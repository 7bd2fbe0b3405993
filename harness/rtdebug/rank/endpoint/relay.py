"""The relay between one attached client and pydevd, message by message, in the rank.

Both directions are cut into whole DAP messages: the client's are checked (``dapgate.DapFramer``: junk never
reaches pydevd), pydevd's are passed on whole, so that the rank can add messages of its own between them.
What the relay does with them:

- **A debugger can never end one rank.** A ``terminate`` request goes to pydevd as a ``disconnect`` that
  leaves the rank running (its response is renamed back to ``terminate``, and a ``terminated`` event follows),
  and a ``disconnect`` with ``terminateDebuggee`` goes with it false. The client is told in its console
  (``output``): "rtdebug: rank 1 keeps running; to end the whole job: `rtdebug stop`". One rank dying would
  take the job with it (its peers fail on a broken connection); ending the job is ``rtdebug stop``'s.
- **What the rank's debugger does, for the rank's record.** pydevd's ``stopped`` and ``continued`` events and
  the client's ``continue`` and step requests go to ``on_dap`` (``rtdebug.rank.allstop``: the entry's debug state, and
  all-stop), whatever the client. pydevd's messages are only looked into when their bytes name one of those.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Callable
from typing import Any

from rtdebug.common import log
from rtdebug.common.config import HIDE_HARNESS
from rtdebug.rank.endpoint.dapgate import DapFramer, NotDAP, message_end
from rtdebug.rank.endpoint.pydevd_socket import close_both

DapHook = Callable[[str, dict], None]
KEEPS_RUNNING = "rtdebug: {label} keeps running; to end the whole job: `rtdebug stop`"
_LENGTH = re.compile(rb"content-length:\s*(\d+)\r\n\r\n", re.IGNORECASE)
_WATCHED = (b'"stopped"', b'"continued"')
STEPS = ("next", "stepIn", "stepOut")  # told to ``on_dap`` as ``step`` (all-stop's step-all)


def frame(msg: dict[str, Any]) -> bytes:
    """One DAP message on the wire."""
    body = json.dumps(msg).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _event(name: str, body: dict[str, Any] | None = None) -> bytes:
    return frame({"seq": 0, "type": "event", "event": name, **({"body": body} if body is not None else {})})


class Relay:
    """One client's relay: ``run(first)`` until either side ends; returns why the client was closed for junk
    (None: it ended by itself)."""

    def __init__(self, client: socket.socket, upstream: socket.socket, label: str, on_dap: DapHook) -> None:
        self.client, self.upstream, self.label, self.on_dap = client, upstream, label, on_dap
        self._write = threading.Lock()  # pydevd's messages and the rank's own reach the client whole
        self._renamed: set[int] = set()  # terminate requests sent on as disconnect: their responses renamed back

    # -- client -> pydevd ---------------------------------------------------------------------------------
    def run(self, first: bytes, start_back: Callable[[Callable[[], None]], Any]) -> str | None:
        framer = DapFramer()
        why = None
        try:
            messages = framer.take(first)
        except NotDAP as exc:  # junk came right behind the initialize: pydevd gets the initialize alone
            why = str(exc)
            end = message_end(first) or 0
            messages = [(first[:end], json.loads(first[first.index(b"\r\n\r\n") + 4 : end]))]
        back = start_back(self._back)
        try:
            self._forward(messages)
            while why is None:
                data = self.client.recv(65536)
                if not data:
                    break
                try:
                    messages = framer.take(data)
                except NotDAP as exc:  # nothing of that chunk goes on
                    why = str(exc)
                    break
                self._forward(messages)
        except OSError:
            pass
        finally:
            close_both(self.client, self.upstream)
        back.join()
        return why

    def _forward(self, messages: list[tuple[bytes, dict]]) -> None:
        for raw, msg in messages:
            self.upstream.sendall(self._from_client(raw, msg))

    def _from_client(self, raw: bytes, msg: dict[str, Any]) -> bytes:
        """What goes to pydevd for one client message (itself, or the safe form of a terminate)."""
        if msg.get("type") != "request":
            return raw
        command, args = msg.get("command"), msg.get("arguments")
        args = args if isinstance(args, dict) else {}
        if command == "continue":
            self._tell("continue", {"threadId": args.get("threadId")})
        elif command in STEPS:
            self._tell("step", {"threadId": args.get("threadId")})
        elif command in ("attach", "launch"):
            return self._hide_harness(raw, msg, args)
        elif command == "terminate":  # whatever else the message holds: it never reaches pydevd as a terminate
            self._say_keeps_running()
            if isinstance(msg.get("seq"), int):
                self._renamed.add(msg["seq"])
            return frame(dict(msg, command="disconnect", arguments={"restart": False, "terminateDebuggee": False}))
        elif command == "disconnect" and args.get("terminateDebuggee"):
            self._say_keeps_running()
            return frame(dict(msg, arguments=dict(args, terminateDebuggee=False)))
        return raw

    @staticmethod
    def _hide_harness(raw: bytes, msg: dict[str, Any], args: dict[str, Any]) -> bytes:
        """The attach with rtdebug's frames kept out of stepping and call stacks (``HIDE_HARNESS``: a Step Into on
        a ``dist.all_reduce`` line never lands in the collective wrapper), unless it names a rule for rtdebug."""
        rules = args.get("rules")
        rules = list(rules) if isinstance(rules, list) else []
        if any(isinstance(r, dict) and r.get("module") == "rtdebug" for r in rules):
            return raw
        return frame(dict(msg, arguments=dict(args, rules=[*rules, *HIDE_HARNESS])))

    def _say_keeps_running(self) -> None:
        text = KEEPS_RUNNING.format(label=self.label) + "\n"
        self._send_client(_event("output", {"category": "console", "output": text}))
        print(KEEPS_RUNNING.format(label=self.label), flush=True)  # the job's log says it too

    # -- pydevd -> client ---------------------------------------------------------------------------------
    def _back(self) -> None:
        buf = bytearray()
        try:
            while True:
                data = self.upstream.recv(65536)
                if not data:
                    break
                buf += data
                while True:
                    m = _LENGTH.match(buf)
                    if m is None or len(buf) < m.end() + int(m[1]):
                        break
                    end = m.end() + int(m[1])
                    self._from_pydevd(bytes(buf[:end]), bytes(buf[m.end() : end]))
                    del buf[:end]
                if len(buf) > 64 and _LENGTH.match(buf) is None:  # not DAP (cannot happen): pass it on as is
                    self._send_client(bytes(buf))
                    buf.clear()
        except OSError:
            pass
        finally:
            close_both(self.client, self.upstream)

    def _from_pydevd(self, raw: bytes, body: bytes) -> None:
        try:
            renamed = self._look(body)
        except (ValueError, TypeError, AttributeError):  # not what pydevd sends: passed on as it is
            log.swallowed("rank.endpoint.relay: a message from pydevd that is not DAP")
            renamed = None
        if renamed is not None:
            self._send_client(renamed + _event("terminated"))
        else:
            self._send_client(raw)

    def _look(self, body: bytes) -> bytes | None:
        """Tell ``on_dap`` of pydevd's stops and continues; the renamed response to a terminate, if this is it."""
        renamed = None
        if self._renamed and b'"response"' in body:
            msg = json.loads(body)
            if msg.get("type") == "response" and msg.get("request_seq") in self._renamed:
                self._renamed.discard(msg["request_seq"])
                renamed = frame(dict(msg, command="terminate", success=True))
        if any(w in body for w in _WATCHED):
            msg = json.loads(body)
            if msg.get("type") == "event" and msg.get("event") in ("stopped", "continued"):
                self._tell(msg["event"], msg.get("body") or {})
        return renamed

    def _send_client(self, data: bytes) -> None:
        with self._write:
            try:
                self.client.sendall(data)
            except OSError:
                pass  # the client is gone: the pumps see it and close both ends

    def _tell(self, kind: str, body: dict[str, Any]) -> None:
        try:
            self.on_dap(kind, body)
        except Exception:  # the rank's record never breaks the client's session
            log.swallowed("rank.endpoint.relay: on_dap failed")
