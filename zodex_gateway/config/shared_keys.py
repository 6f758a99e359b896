"""The keys every mode's file shares (docs/config.md#keys): the limits, ``session.cgroups``,
the HTTP listener's (``mcp.max-body``, ``http.*``) and log rotation's (``log.*``).

The defaults of the limit keys are read from ``zodex_protocol.limits.Limits`` so the two
cannot drift. Each mode takes the ones it uses (a fleet host has no HTTP listener).
"""

from __future__ import annotations

from typing import Final

from zodex_protocol.limits import Limits

from .kinds import PORT_BOUNDS as PORT_BOUNDS  # the keys give it as their range
from .schema import ConfigKey

DAY_MS: Final = 86_400_000
_LIMITS = Limits()
_Bounds = tuple[int | None, int | None]
_DEFAULT_BOUNDS: dict[str, _Bounds] = {
    "duration": (1, 3650 * DAY_MS),
    "size": (1, 1024**4),
    "int": (1, 1024**3),
}
# Tighter than the kind allows: a ping every millisecond would be a busy loop.
_BOUNDS: dict[str, _Bounds] = {
    "session.max-per-worker": (1, 4096),
    "worker.max-idle": (1, 4096),
    "worker.health-interval": (100, 3650 * DAY_MS),
    "mcp.max-body": (64 * 1024, 1024**3),
    "http.header-timeout": (100, 3_600_000),
    "http.max-pending-connections": (1, 65536),
    "log.max-size": (64 * 1024, 1024**4),  # a smaller file would rotate on every few lines
    "log.keep": (1, 100),
    "output.preview-head": (0, 100),  # a percentage; 0: a preview of the end alone
}


def make_key(
    name: str,
    kind: str,
    default: object,
    description: str,
    limits_field: str | None = None,
    bounds: _Bounds | None = None,
    choices: tuple[str, ...] = (),
) -> ConfigKey:
    """A key with its kind's range unless ``bounds`` (or the table above) says otherwise."""
    low, high = bounds or _BOUNDS.get(name) or _DEFAULT_BOUNDS.get(kind, (None, None))
    if limits_field is not None and limits_field.endswith("_s"):
        low = 1000  # a field kept in seconds cannot hold a fraction of one
    return ConfigKey(name, kind, default, description, limits_field, low, high, choices)


def _limit_key(name: str, kind: str, field: str, description: str) -> ConfigKey:
    raw = getattr(_LIMITS, field)
    in_seconds = field.endswith("_s")
    return make_key(name, kind, raw * 1000 if in_seconds else raw, description, field)


# fmt: off
_LIMIT_ROWS = (  # name, kind, Limits field, description
    ("session.exec-yield", "duration", "exec_yield_ms", "how long exec_command waits before answering"),
    ("session.write-yield", "duration", "write_yield_ms", "how long write_stdin waits before answering"),
    ("session.yield-min", "duration", "yield_min_ms", "lowest yield a caller may ask for"),
    ("session.yield-max", "duration", "yield_max_ms", "highest yield a caller may ask for"),
    ("session.poll-settle", "duration", "poll_settle_ms", "quiet time after new output before answering"),
    ("session.progress-interval", "duration", "progress_interval_ms", "time between progress notes of a waiting call"),
    ("session.timeout", "duration", "timeout_ms", "default command timeout"),
    ("session.timeout-min", "duration", "timeout_min_ms", "lowest timeout a caller may ask for"),
    ("session.timeout-max", "duration", "timeout_max_ms", "highest timeout a caller may ask for"),
    ("session.kill-grace", "duration", "kill_grace_ms", "wait between SIGTERM and SIGKILL"),
    ("session.drain", "duration", "drain_ms", "output still read after the leader exits"),
    ("session.max-per-worker", "int", "sessions_per_worker", "live sessions per worker"),
    ("session.tombstone", "duration", "tombstone_s", "how long a finished session's result is kept"),
    ("output.inline-limit", "int", "inline_output_chars", "characters of output returned inline"),
    ("output.preview", "int", "preview_chars", "characters of preview when output spills"),
    ("output.preview-head", "int", "preview_head_percent", "percent of the preview taken from the output's start"),
    ("output.spill-cap", "size", "spill_file_cap_bytes", "largest spill file"),
    ("output.spill-max-age", "duration", "spill_max_age_s", "age at which spill files are removed"),
    ("worker.idle-exit", "duration", "idle_worker_exit_s", "a worker with no live session exits after"),
    ("worker.health-interval", "duration", "health_interval_ms", "how often workers are pinged"),
    ("worker.max-idle", "int", "max_idle_workers", "idle workers kept; the least recently used stop first"),
    ("limits.max-cmd-chars", "int", "max_cmd_chars", "longest exec_command cmd accepted"),
    ("limits.max-chars-chars", "int", "max_chars_chars", "longest write_stdin chars accepted"),
    ("limits.max-patch-chars", "int", "max_patch_chars", "longest apply_patch input accepted"),
)
# fmt: on
LIMIT_KEYS: Final = (
    *(_limit_key(*row) for row in _LIMIT_ROWS),
    make_key("session.cgroups", "switch", True, "each command in its own cgroup where the machine allows"),
)
HTTP_KEYS: Final = (
    make_key("mcp.max-body", "size", 64 * 1024**2, "largest MCP request body over HTTP (413 beyond)"),
    make_key(
        "http.header-timeout", "duration", 5000, "an HTTP connection must send its request headers within"
    ),
    make_key(
        "http.max-pending-connections",
        "int",
        256,
        "HTTP connections still sending headers; the oldest is closed",
    ),
)
LOG_KEYS: Final = (
    make_key("log.max-size", "size", 8 * 1024**2, "a log file is rotated when it reaches this size"),
    make_key("log.keep", "int", 3, "rotated log files kept (<name>.1 is the newest)"),
)
SHARED_KEYS: Final = (*LIMIT_KEYS, *HTTP_KEYS, *LOG_KEYS)

# Pairs (low, high) whose effective values must satisfy low <= high: the clamps must be able
# to contain their own defaults, otherwise every call would be silently clamped.
ORDERED: Final = (
    ("session.yield-min", "session.yield-max"),
    ("session.yield-min", "session.exec-yield"),
    ("session.exec-yield", "session.yield-max"),
    ("session.yield-min", "session.write-yield"),
    ("session.write-yield", "session.yield-max"),
    ("session.timeout-min", "session.timeout-max"),
    ("session.timeout-min", "session.timeout"),
    ("session.timeout", "session.timeout-max"),
    ("output.preview", "output.inline-limit"),
)
