"""Where Local mode keeps its state (docs/modes.md#local), XDG-aware."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LocalPaths:
    state: Path  # $XDG_STATE_HOME/zodex/local

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LocalPaths:
        env = os.environ if env is None else env
        base = env.get("XDG_STATE_HOME") or os.path.join(
            env.get("HOME") or os.path.expanduser("~"), ".local", "state"
        )
        return cls(Path(base) / "zodex" / "local")

    @property
    def runtime(self) -> Path:
        return self.state / "runtime"

    @property
    def discovery(self) -> Path:
        return self.runtime / "discovery.json"

    @property
    def token(self) -> Path:
        return self.runtime / "mcp-token"

    @property
    def observer_bearer(self) -> Path:
        """The observer API's bearer secret; kept across restarts, replaced on rotation."""
        return self.runtime / "observer-bearer"

    @property
    def owned(self) -> Path:
        """Processes a runtime started besides its workers (the tunnel), for clean-up after a crash."""
        return self.runtime / "owned.json"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def log_file(self) -> Path:
        return self.logs / "runtime.log"

    @property
    def spill(self) -> Path:
        return self.state / "spill"

    @property
    def history(self) -> Path:
        return self.state / "history"

    def create(self) -> None:
        """Every directory Local needs, private to the user."""
        for directory in (self.state, self.runtime, self.logs, self.spill, self.history):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(directory, 0o700)
