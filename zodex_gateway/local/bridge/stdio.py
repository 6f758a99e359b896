"""``zodex local connect``: MCP on stdin/stdout, forwarded to the running Local runtime
(docs/modes.md#zodex-local-connect).

Every line gets an answer, as on ``zodex-gateway stdio``: what is not a JSON-RPC request is
answered here (:mod:`zodex_gateway.mcp.jsonrpc_rules`); a request goes to the runtime on a
thread of its own, so a long call never holds up the next; with Local down the bridge
answers itself (:mod:`zodex_gateway.local.bridge.revisions`). Only the standard library and
Zodex's own light modules load on this path: the bridge answers in milliseconds, and the
runtime, which has the MCP SDK, validates what it forwards.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any, BinaryIO

from zodex_gateway.config.package_version import zodex_version
from zodex_gateway.local.bridge import forward
from zodex_gateway.local.bridge.revisions import (
    INTERNAL_ERROR,
    Json,
    OwnAnswers,
    error,
    negotiated,
    per_request_version,
)
from zodex_gateway.local.paths import LocalPaths
from zodex_gateway.mcp import jsonrpc_rules
from zodex_system.private_dirs import UnsafeDirectory

UNDELIVERABLE = "the call ran on the runtime but its result could not be delivered: {reason}"
LOST = "Zodex Local did not answer the call ({reason}); it may have stopped"
REFUSED = "Zodex Local answered HTTP {status}: {reason}"


def not_running_message() -> str:
    from zodex_gateway.config.operator_command import zodex_command  # only with Local down

    return f"Zodex Local is not running; start it with {zodex_command('local', 'start')}"


class Output:
    """stdout: one JSON text per line, whole lines only, from any thread."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self.closed = False

    def write(self, line: bytes) -> None:
        with self._lock:
            if self.closed:
                return
            try:
                self._stream.write(line + b"\n")
                self._stream.flush()
            except (BrokenPipeError, ValueError):
                self.closed = True  # the client went away: answers have nowhere to go

    def message(self, message: Json) -> None:
        self.write(
            json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
        )


class Bridge:
    def __init__(self, paths: LocalPaths, output: Output) -> None:
        self._paths = paths
        self._out = output
        self._forwarder = forward.Forwarder(paths)
        self._in_flight: dict[object, forward.InFlight] = {}
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._own: OwnAnswers | None = None

    def take(self, line: bytes) -> None:
        """One line of input: answered at once, or handed to a thread that forwards it."""
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            self._out.message(_unparsable(line))
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self._out.message(jsonrpc_rules.reply_to_invalid(message))
            return
        method = message.get("method")
        if not isinstance(method, str):
            if "result" not in message and "error" not in message:
                self._out.message(jsonrpc_rules.reply_to_invalid(message))
            return  # an answer to a request: the bridge never asks the client anything
        if "id" not in message or jsonrpc_rules.usable_id(message) is None:
            refusal = jsonrpc_rules.reply_to_idless(method)
            if refusal is not None:
                self._out.message(refusal)
            elif method == "notifications/cancelled":
                self._cancel(message)
            return  # other notifications: the runtime keeps no state they could change
        flight = forward.InFlight(
            message["id"], notify=self._out.write, per_request=per_request_version(message) is not None
        )
        thread = threading.Thread(target=self._answer, args=(message, line, flight), daemon=True)
        with self._lock:
            self._in_flight[message["id"]] = flight
            self._threads.add(thread)
        thread.start()

    def finish(self) -> None:
        """End of input: the answers still coming are written, then the bridge ends."""
        while True:
            with self._lock:
                threads = list(self._threads)
            if not threads:
                break
            for thread in threads:
                thread.join()
        self._forwarder.close()

    def _cancel(self, message: Json) -> None:
        params = message.get("params")
        request_id = params.get("requestId") if isinstance(params, dict) else None
        with self._lock:
            flight = self._in_flight.get(request_id) if isinstance(request_id, str | int) else None
        if flight is None:
            return
        flight.cancel()  # cuts its connection; a cancelled request is never answered
        if not flight.per_request:
            # In the handshake era the runtime hears a cancel, not a cut: on a thread, as
            # the input must go on being read.
            raw = json.dumps(message).encode()
            threading.Thread(target=self._forwarder.cancel, args=(raw,), daemon=True).start()

    def _answer(self, message: Json, line: bytes, flight: forward.InFlight) -> None:
        try:
            reply = self._reply(message, line, flight)
        except ConfigUnreadable as exc:
            reply = error(message["id"], INTERNAL_ERROR, str(exc))
        except Exception as exc:  # every request gets an answer
            reply = error(message["id"], INTERNAL_ERROR, f"zodex local connect: {type(exc).__name__}: {exc}")
        try:
            if reply is not None:
                self._out.message(reply)
        finally:
            with self._lock:
                if self._in_flight.get(message["id"]) is flight:
                    del self._in_flight[message["id"]]
                self._threads.discard(threading.current_thread())

    def _reply(self, message: Json, line: bytes, flight: forward.InFlight) -> Json | None:
        """The bridge's own answer, or None when there is none to write (written, or cancelled)."""
        try:
            outcome = self._forwarder.send(message, line, flight)
        except UnsafeDirectory as exc:
            return self._failure(message, str(exc))
        if flight.cancelled:
            return None
        if isinstance(outcome, forward.Answered):
            for text in outcome.lines:
                self._out.write(text)
            return None
        if isinstance(outcome, forward.NotRunning):
            return self._own_answer(message)
        if isinstance(outcome, forward.Lost):
            if message.get("method") != "tools/call":
                return self._own_answer(message)  # nothing ran: answer as with Local down
            return self._failure(message, LOST.format(reason=outcome.reason))
        if isinstance(outcome, forward.Refused):
            return self._failure(message, REFUSED.format(status=outcome.status, reason=outcome.reason))
        assert isinstance(outcome, forward.Undeliverable)
        return self._failure(message, UNDELIVERABLE.format(reason=outcome.reason))

    def _failure(self, message: Json, text: str) -> Json:
        """A tool call's failure is a tool error the model can read; anything else's a JSON-RPC error."""
        if message.get("method") == "tools/call":
            return self._answers().tool_error(
                message["id"], text, modern=per_request_version(message) is not None
            )
        return error(message["id"], INTERNAL_ERROR, text)

    def _own_answer(self, message: Json) -> Json:
        from zodex_gateway.mcp.instructions import instructions

        # The start directory of the last runtime reached, as that runtime would say it.
        said = instructions(self._forwarder.last_start_directory)
        answer = self._answers().answer(message, said, not_running_message())
        if message.get("method") == "initialize" and "result" in answer:
            params = message.get("params")
            requested = params.get("protocolVersion") if isinstance(params, dict) else None
            self._forwarder.saw_initialize(message, negotiated(requested))
        return answer

    def _answers(self) -> OwnAnswers:
        if self._own is None:
            from zodex_gateway.mcp.instructions import SERVER_NAME

            self._own = OwnAnswers({"name": SERVER_NAME, "version": zodex_version()}, _configured_tools)
        return self._own


class ConfigUnreadable(Exception):
    """``local.toml`` cannot be read: what the tools would be is unknown."""


def _configured_tools() -> list[dict[str, Any]]:
    """The tools Local lists, or will list once started: the configuration of now."""
    from zodex_gateway.config.settings import ConfigError, LocalConfig, config_path
    from zodex_gateway.mcp import tools

    try:
        config = LocalConfig.load(config_path())
    except ConfigError as exc:
        raise ConfigUnreadable(str(exc)) from None
    return tools.catalog(config.limits(), read_only_hint=config.flag("mcp.read-only-hint"))


def _unparsable(line: bytes) -> Json:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return jsonrpc_rules.error(jsonrpc_rules.PARSE_ERROR, f"Parse error: not valid UTF-8 ({exc.reason})")
    reply = jsonrpc_rules.reply_to_unparsable(text)
    assert reply is not None  # a blank line was skipped before
    return reply


def run_bridge(paths: LocalPaths, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
    output = Output(stdout or sys.stdout.buffer)
    bridge = Bridge(paths, output)
    source = stdin or sys.stdin.buffer
    try:
        for line in iter(source.readline, b""):
            bridge.take(line)
            if output.closed:
                break
        bridge.finish()
    except KeyboardInterrupt:
        pass
    return 0
