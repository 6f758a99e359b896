"""JSON-RPC answers for input that is not a usable message (docs/tools.md#errors), in plain
dicts: no MCP SDK, so the stdio bridge (:mod:`zodex_gateway.local.bridge`) starts without it.

- a line that is not JSON gets ``-32700`` (id ``null``); JSON that is not a JSON-RPC
  message gets ``-32600`` (with its id when it has a usable one);
- a request whose id is not a string or an integer gets ``-32600`` with id ``null``;
- a message whose string holds an unpaired surrogate is refused naming where: inside a
  ``tools/call``'s arguments it is a tool error (``cmd must be valid Unicode (unpaired
  surrogate)``), elsewhere a JSON-RPC error. Such a call never reaches the tools, so it is
  not recorded.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602
# A \uD800-\uDFFF escape: the only way a surrogate gets into JSON text that is valid UTF-8.
SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_NOT_UNICODE: Final = "must be valid Unicode (unpaired surrogate)"

Json = dict[str, Any]


def error(code: int, message: str, request_id: object = None) -> Json:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def tool_error(request_id: object, message: str) -> Json:
    result = {"content": [{"type": "text", "text": message}], "isError": True}
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def usable_id(message: object) -> object:
    """The message's id if a reply can carry it (a string or an integer), else None."""
    if not isinstance(message, dict):
        return None
    value = message.get("id")
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    if isinstance(value, str) and _SURROGATE.search(value):
        return None
    return value


def reply_to_unparsable(text: str) -> Json | None:
    """The answer to a stdio line the SDK's parser refused; None for a blank line."""
    if not text.strip():
        return None
    try:
        message = json.loads(text)
    except RecursionError:
        return error(PARSE_ERROR, "Parse error: nested too deeply")
    except ValueError as exc:
        detail = (
            f"{exc.msg} at line {exc.lineno} column {exc.colno}"
            if isinstance(exc, json.JSONDecodeError)
            else exc
        )
        return error(PARSE_ERROR, f"Parse error: {detail}")
    refusal = unicode_refusal(message)
    # Python's parser is laxer than the SDK's in other ways too (NaN, Infinity).
    return refusal if refusal is not None else error(PARSE_ERROR, "Parse error: not valid JSON")


def reply_to_invalid(message: object) -> Json:
    """The answer to JSON that is not a JSON-RPC 2.0 message."""
    return error(INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message", usable_id(message))


def unicode_refusal(message: object) -> Json | None:
    """The answer to a message holding an unpaired surrogate, or None if it holds none."""
    found = _first_surrogate(message)
    if found is None:
        return None
    path, in_key = found
    request_id = usable_id(message)
    is_request = isinstance(message, dict) and isinstance(message.get("method"), str) and "id" in message
    if is_request and request_id is not None:
        assert isinstance(message, dict)
        if message["method"] == "tools/call" and path[:2] == ["params", "arguments"]:
            return tool_error(request_id, _describe(path[2:], in_key, top="argument names"))
        if path[:1] == ["params"]:
            return error(INVALID_PARAMS, f"Invalid params: {_describe(path, in_key)}", request_id)
    return error(INVALID_REQUEST, f"Invalid Request: {_describe(path, in_key)}", request_id)


def _describe(path: list[str | int], in_key: bool, top: str = "keys of the message") -> str:
    """``cmd must be …``, ``keys of env must be …``; ``top`` names the keys at the root."""
    if in_key:
        return f"{f'keys of {_dotted(path)}' if path else top} {_NOT_UNICODE}"
    return f"{_dotted(path) or 'arguments'} {_NOT_UNICODE}"


def _dotted(path: list[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _first_surrogate(value: object) -> tuple[list[str | int], bool] | None:
    """Where the first unpaired surrogate is, in document order: the path to the string (or
    to the object whose key holds it, then True). Iterative: JSON may nest deeply."""
    stack: list[tuple[object, list[str | int]]] = [(value, [])]
    while stack:
        current, path = stack.pop()
        if isinstance(current, str):
            if _SURROGATE.search(current):
                return path, False
        elif isinstance(current, dict):
            if any(_SURROGATE.search(key) for key in current):
                return path, True
            stack.extend((item, [*path, key]) for key, item in reversed(current.items()))
        elif isinstance(current, list):
            stack.extend((item, [*path, index]) for index, item in reversed(list(enumerate(current))))
    return None


def reply_to_idless(method: str) -> Json | None:
    """The answer to a message with ``method`` that has no usable id: a request (its id was
    ``true``, ``null``, ``1.5``, an object, or missing) gets ``-32600``; a notification,
    whose method always starts with ``notifications/``, none."""
    if method.startswith("notifications/"):
        return None
    return error(
        INVALID_REQUEST, f"Invalid Request: a {method} request needs an id that is a string or an integer"
    )
