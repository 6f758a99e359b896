"""Loopback stand-ins for the model APIs outside clients call: Anthropic's Messages API (for
Claude Code, through ``ANTHROPIC_BASE_URL``) and OpenAI's Responses API (for Codex, through a
``model_provider`` with ``base_url``). Each plays a :class:`ToolScript`: it answers with
the next tool call, streamed as the real API streams it, and records the results the client
sends back. Requests that offer no Zodex tool (a client's own side requests: titles, quota
checks) get a short text answer and change nothing.

Every request is kept in ``requests`` (path and body), so that a failing test can show
what the client really sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.tool_script import DONE, NO_TOOLS, ToolScript, result_text

API_KEY = "standin-key-for-loopback-only"
MODEL = "standin-model"
NAMESPACED = "__"


class StandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: ToolScript, answer: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), answer)
        self.script = script
        self.requests: list[tuple[str, Any]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: StandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the requests are kept, not printed

    def _body(self) -> Any:
        size = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(size) if size else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self.server.requests.append((f"{self.command} {self.path}", body))
        return body

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _events(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        data = b"".join(f"event: {name}\ndata: {json.dumps(event)}\n\n".encode() for name, event in events)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._body()
        self._json(404, {"error": {"type": "not_found_error", "message": f"no {self.path} here"}})

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


class AnthropicMessages(_Handler):
    """``POST /v1/messages``, streaming or not; ``count_tokens`` answered with a small count."""

    def do_POST(self) -> None:
        body = self._body()
        if self.path.startswith("/v1/messages/count_tokens"):
            self._json(200, {"input_tokens": 1})
            return
        if not self.path.startswith("/v1/messages") or not isinstance(body, dict):
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
            return
        names = self.server.script.offer([str(t.get("name")) for t in body.get("tools") or []])
        content = self._reply(body, names)
        stop = "tool_use" if content[0]["type"] == "tool_use" else "end_turn"
        message = {
            "id": f"msg_standin_{len(self.server.requests)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", MODEL),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
        if body.get("stream"):
            self._events(_message_events(message))
        else:
            self._json(200, message)

    def _reply(self, body: dict[str, Any], names: dict[str, str]) -> list[dict[str, Any]]:
        if not names:
            return [{"type": "text", "text": NO_TOOLS if body.get("tools") else "ok"}]
        returned = [
            (result_text(block.get("content")), bool(block.get("is_error")))
            for message in body.get("messages", [])
            if message.get("role") == "user" and isinstance(message.get("content"), list)
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
        call = self.server.script.next_call(returned)
        if call is None:
            return [{"type": "text", "text": DONE}]
        name = names.get(call.tool, call.tool)
        return [
            {
                "type": "tool_use",
                "id": f"toolu_standin_{len(returned)}",
                "name": name,
                "input": call.arguments,
            }
        ]


def _message_events(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    [block] = message["content"]
    start = {**message, "content": [], "stop_reason": None}
    if block["type"] == "tool_use":
        opened = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    else:
        opened = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": block["text"]}
    return [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": opened}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 1},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


class OpenAIResponses(_Handler):
    """``POST <base>/responses``, streamed as Codex asks for it."""

    def do_POST(self) -> None:
        body = self._body()
        if not self.path.rstrip("/").endswith("/responses") or not isinstance(body, dict):
            self._json(404, {"error": {"message": f"no {self.path} here", "type": "invalid_request_error"}})
            return
        names = self.server.script.offer(_tool_names(body.get("tools") or []))
        item = self._reply(body, names)
        response_id = f"resp_standin_{len(self.server.requests)}"
        usage = {
            "input_tokens": 1,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 1,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 2,
        }
        self._events(
            [
                ("response.created", {"type": "response.created", "response": {"id": response_id}}),
                (
                    "response.output_item.done",
                    {"type": "response.output_item.done", "output_index": 0, "item": item},
                ),
                (
                    "response.completed",
                    {"type": "response.completed", "response": {"id": response_id, "usage": usage}},
                ),
            ]
        )

    def _reply(self, body: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
        items = body.get("input") if isinstance(body.get("input"), list) else []
        if not names:
            return _text_item(NO_TOOLS if body.get("tools") else "ok")
        returned = [
            (_output_text(item.get("output")), _output_failed(item.get("output")))
            for item in items
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        call = self.server.script.next_call(returned)
        if call is None:
            return _text_item(DONE)
        return {
            "type": "function_call",
            "id": f"fc_standin_{len(returned)}",
            "call_id": f"call_standin_{len(returned)}",
            **_function_call(names.get(call.tool, call.tool)),
            "arguments": json.dumps(call.arguments),
            "status": "completed",
        }


def _tool_names(tools: list[Any]) -> list[str]:
    """The functions offered; one in a namespace (Codex puts each MCP server's tools in one)
    as ``<namespace>__<name>``, the name the model would otherwise see."""
    names = []
    for tool in tools:
        if isinstance(tool, dict):
            names.append(str(tool.get("name")))
            within = [t for t in tool.get("tools") or [] if isinstance(t, dict)]
            names.extend(f"{tool.get('name')}{NAMESPACED}{t.get('name')}" for t in within)
    return names


def _function_call(name: str) -> dict[str, str]:
    namespace, _, within = name.rpartition(NAMESPACED)
    return {"namespace": namespace, "name": within} if namespace else {"name": name}


def _output_text(output: Any) -> str:
    if isinstance(output, dict):
        return result_text(output.get("content", output))
    return result_text(output)


def _output_failed(output: Any) -> bool:
    return isinstance(output, dict) and output.get("success") is False


def _text_item(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_standin",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


@contextmanager
def serving(script: ToolScript, answer: type[BaseHTTPRequestHandler]) -> Iterator[StandIn]:
    """A stand-in on a free loopback port, for as long as the block runs."""
    server = StandIn(script, answer)
    thread = threading.Thread(target=server.serve_forever, name="model-standin", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
