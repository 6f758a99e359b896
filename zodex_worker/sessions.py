"""The worker's sessions: capacity, least-recently-used eviction and 1-hour tombstones."""

from __future__ import annotations

import time
from dataclasses import dataclass

from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.replies import SessionResult
from zodex_worker.results import session_result
from zodex_worker.session import Session


@dataclass
class Tombstone:
    final: SessionResult  # the session's last result, output left out
    expires_at: float  # monotonic


class SessionTable:
    def __init__(self, capacity: int, tombstone_seconds: float) -> None:
        self.capacity = capacity
        self.tombstone_seconds = tombstone_seconds
        self.live: dict[str, Session] = {}
        self.tombstones: dict[str, Tombstone] = {}

    def running_count(self) -> int:
        return sum(1 for s in self.live.values() if s.running)

    def jobs_left_behind(self) -> bool:
        """Whether an exited session still has left-behind jobs running (counted afresh):
        the worker must not idle out under them."""
        return any(s.refresh_background() for s in self.live.values() if _has_jobs(s))

    def make_room(self) -> Session | None:
        """Evict the least recently used exited session if full, and return it (the call
        that caused it reports it); refuse when all run. A session whose left-behind jobs
        were last seen running is evicted only when no other exited session is left,
        because evicting it ends them (docs/sessions.md#capacity-and-eviction)."""
        if len(self.live) < self.capacity:
            return None
        exited = [s for s in self.live.values() if not s.running]
        if not exited:
            raise ProtocolError(
                ErrorCode.CAPACITY,
                f"session capacity reached ({self.capacity} running sessions); "
                "finish or kill one before starting another command",
            )
        victim = min(exited, key=lambda s: (_has_jobs(s), s.last_used))
        self.retire(victim)
        return victim

    def add(self, session: Session) -> None:
        self.live[session.handle] = session

    def retire(self, session: Session) -> None:
        """Turn an exited session into a tombstone and let go of its PTY and buffers."""
        self.live.pop(session.handle, None)
        if _has_jobs(session):
            session.terminate()  # left-behind jobs end with their session
            assert session.ending is not None
            session.ending.background = 0  # the tombstone must not offer a kill it cannot do
        if session.handle_delivered:
            final = session_result(session, "")
            self.tombstones[session.handle] = Tombstone(final, time.monotonic() + self.tombstone_seconds)
        session.discard()

    def drop(self, session: Session) -> None:
        """Forget a session whose handle never left the worker (it ended within exec's yield)."""
        self.live.pop(session.handle, None)
        session.discard()

    def find(self, handle: str) -> Session | Tombstone | None:
        now = time.monotonic()
        for key in [k for k, t in self.tombstones.items() if t.expires_at <= now]:
            del self.tombstones[key]
        return self.live.get(handle) or self.tombstones.get(handle)


def _has_jobs(session: Session) -> bool:
    """An exited session whose left-behind jobs were running when last counted."""
    return session.ending is not None and session.ending.background > 0
