"""The numbers of docs/config.md#keys, in one place, shared by the gateway and its workers.

Every value is a default that configuration may override; the gateway hands the effective
set to each worker it spawns (as JSON on the command line).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Limits:
    exec_yield_ms: int = 10_000
    write_yield_ms: int = 10_000
    yield_min_ms: int = 50
    # 30 s: Codex's own cap, and half the 60 s request timeout of the MCP TypeScript SDK
    # (docs/config.md#keys), so a call that asks for the longest yield still gets its answer.
    yield_max_ms: int = 30_000
    poll_settle_ms: int = 250
    progress_interval_ms: int = 5_000  # between progress notes of a waiting call with a token
    timeout_ms: int = 7_200_000
    timeout_min_ms: int = 1_000
    timeout_max_ms: int = 7_200_000
    kill_grace_ms: int = 5_000
    drain_ms: int = 200
    inline_output_chars: int = 16_000
    preview_chars: int = 4_000
    preview_head_percent: int = 25  # of preview_chars, from the delta's start (the rest: its end)
    spill_file_cap_bytes: int = 16 * 1024 * 1024
    spill_max_age_s: int = 24 * 3600
    sessions_per_worker: int = 64
    tombstone_s: int = 3600
    idle_worker_exit_s: int = 600
    max_idle_workers: int = 32  # idle workers a gateway keeps; the least recently used go first
    health_interval_ms: int = 30_000  # how often the gateway pings the workers it uses
    # Oversized-field guards: refuse instead of shipping megabytes to a PTY.
    max_cmd_chars: int = 64 * 1024
    max_chars_chars: int = 64 * 1024
    max_patch_chars: int = 16 * 1024 * 1024

    def clamp_yield(self, requested: int | None, *, for_exec: bool) -> int:
        default = self.exec_yield_ms if for_exec else self.write_yield_ms
        value = default if requested is None else requested
        return max(self.yield_min_ms, min(self.yield_max_ms, value))

    def clamp_timeout(self, requested: int | None) -> int:
        value = self.timeout_ms if requested is None else requested
        return max(self.timeout_min_ms, min(self.timeout_max_ms, value))

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Limits:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown limit(s): {', '.join(sorted(unknown))}")
        return cls(**{k: int(v) for k, v in data.items()})


def max_message_bytes(limits: Limits) -> int:
    """The largest message a Zodex socket reads (``ZMQ_MAXMSGSIZE``: the worker's and the
    gateway's sockets between them, a fleet host's): the largest argument or inline output
    in UTF-8's worst case (4 bytes a character), plus a MiB for the envelope and the other
    fields. ZeroMQ enforces it on every frame, before anything of it is buffered whole."""
    largest = max(
        limits.max_patch_chars,
        limits.max_cmd_chars,
        limits.max_chars_chars,
        limits.inline_output_chars + limits.preview_chars,
    )
    return 4 * largest + 1024**2
