"""Message type names and the shape of their bodies.

Requests (gateway → worker, on the worker's ROUTER), each answered by exactly one reply
whose ``re`` is the request id — either the named reply type or ``error``:

=============  ============================================  =========
request        body                                          reply
=============  ============================================  =========
``ping``       ``{}``                                        ``pong``
``exec``       :class:`ExecRequest`                          ``result``
``write``      :class:`WriteRequest`                         ``result``
``patch``      ``{"patch": str, "workdir": str}``            ``patched``
``shutdown``   ``{}``                                        ``bye``
=============  ============================================  =========

``error`` bodies are ``{"code": int, "message": str}`` (see errors.py).

Events (worker → anyone, on the worker's XPUB socket; topic frame, then the envelope):
``output`` ``{"session": handle, "seq": n, "text": raw decoded text}`` (``seq`` counts a
session's output events from 1, so a subscriber can tell it missed some),
``process_started`` ``{"session", "pid", "cmd", "cwd", "started_at", "tag"}`` (``tag``: the
exec request's ``_tag``, or null),
``process_ended`` ``{"session", "exit_code", "signal", "reason", "ended_at", "background",
"output_events"}``. A new subscriber first receives the single frame ``welcome``.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

PING = "ping"
PONG = "pong"
EXEC = "exec"
WRITE = "write"
PATCH = "patch"
PATCHED = "patched"
SHUTDOWN = "shutdown"
BYE = "bye"
RESULT = "result"
ERROR = "error"

EVENT_OUTPUT = "output"
EVENT_PROCESS_STARTED = "process_started"
EVENT_PROCESS_ENDED = "process_ended"
WELCOME = b"welcome"


class ExecRequest(TypedDict):
    cmd: str
    workdir: str
    yield_time_ms: NotRequired[int]
    timeout_ms: NotRequired[int]
    # Wire-only: an opaque label (≤ 64 characters) set by the gateway — the id of the call
    # in history — echoed in ``process_started``, so viewers can tie a command's live
    # output to its call before the call returns the handle.
    _tag: NotRequired[str]


EXEC_TAG = "_tag"
MAX_TAG_CHARS = 64
# Wire-only, in an exec reply for a command that already ended (so the reply has no
# session_handle): the handle of the session it ran in. The gateway strips it.
SESSION_KEY = "_session"


class WriteRequest(TypedDict):
    session_handle: str
    chars: NotRequired[str]
    yield_time_ms: NotRequired[int]
    kill_process: NotRequired[bool]


class PongBody(TypedDict):
    worker_id: str
    incarnation: int
    pid: int
    workdir: str
    live_sessions: int


PatchedBody = dict[str, Any]  # {"ok": bool, "text": str, "files": [evidence dicts]}
