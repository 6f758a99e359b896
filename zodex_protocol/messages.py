"""Message type names and the wire-only keys; the typed bodies live one family per module.

Requests (gateway → worker, on the worker's ROUTER), each answered by exactly one reply
whose ``re`` is the request id — either the named reply type or ``error``:

=============  ==============================  ===================================
request        body (requests.py)              reply (replies.py)
=============  ==============================  ===================================
``ping``       ``{}``                          ``pong``: :class:`Pong`
``exec``       :class:`ExecRequest`            ``result``: :class:`SessionResult`
``write``      :class:`WriteRequest`           ``result``: :class:`SessionResult`
``patch``      :class:`PatchRequest`           ``patched``: :class:`Patched`
``shutdown``   ``{}``                          ``bye``: ``{}``
``retire``     ``{}``                          ``retired``: ``{"stopping": bool}``
``cancel``     ``{"id": str}``                 none
``person``     :class:`PersonInputRequest`     ``typed``: :class:`PersonTyped`
``take_over``  :class:`TakeOverRequest`        ``taken_over``: ``{session_handle, taken}``
=============  ==============================  ===================================

``cancel`` ends the wait of the ``exec`` or ``write`` whose id it names (its client
cancelled the tool call): that request is never answered, takes no output, and its command
goes on. An ``exec`` or ``write`` carrying ``_progress`` (milliseconds, at least
:data:`MIN_PROGRESS_MS`) is sent a ``progress`` message (``re`` = its id, body
``{"session": str, "elapsed_ms": int, "new_chars": int}``) that often while it waits,
before its one reply.

``retire`` stops the worker as ``shutdown`` does, but only when it is idle — no command
running, no jobs a command left behind, no other tool request in flight — decided on the
worker, so nothing another gateway started can slip in between the check and the stop.

``error`` bodies are ``{"code": int, "message": str}`` (see errors.py).

Events (worker → anyone, on the worker's XPUB socket; topic frame, then the envelope) are
in events.py: ``output``, ``process_started``, ``process_ended``. A new subscriber first
receives the single frame ``welcome``.
"""

from __future__ import annotations

PING = "ping"
PONG = "pong"
EXEC = "exec"
WRITE = "write"
PATCH = "patch"
PATCHED = "patched"
SHUTDOWN = "shutdown"
BYE = "bye"
RETIRE = "retire"
RETIRED = "retired"
CANCEL = "cancel"
PROGRESS = "progress"
RESULT = "result"
ERROR = "error"
# Gateway → fleet host over tcp (docs/fleet.md#the-wire): one tool call, ``{tool, args, tag?}``,
# answered by ``result``, ``patched`` or ``error`` as a worker answers.
CALL = "call"
# A person's keystrokes from a viewer (docs/observer.md#a-person-types-into-a-session):
# written to the session's PTY as they are, never through a tool call.
PERSON = "person"
TYPED = "typed"
# A person takes a session over (the model's characters are refused) or gives it back.
TAKE_OVER = "take_over"
TAKEN_OVER = "taken_over"

EVENT_OUTPUT = "output"
EVENT_PROCESS_STARTED = "process_started"
EVENT_PROCESS_ENDED = "process_ended"
WELCOME = b"welcome"


# Wire-only, in an exec request: an opaque label (≤ 64 characters) set by the gateway — the
# id of the call in history — echoed in ``process_started``, so viewers can tie a command's
# live output to its call before the call returns the handle.
EXEC_TAG = "_tag"
MAX_TAG_CHARS = 64
# Wire-only, in an exec reply for a command that already ended (so the reply has no
# session_handle): the handle of the session it ran in. The gateway strips it.
SESSION_KEY = "_session"

# Wire-only, in an exec or write request: report progress this often (milliseconds).
PROGRESS_KEY = "_progress"
MIN_PROGRESS_MS = 500

TERMINATION_REASONS = ("exit", "timeout", "killed")
