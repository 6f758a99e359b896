"""Where Local mode keeps its state (docs/modes.md#local), XDG-aware."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zodex_system import xdg
from zodex_system.private_dirs import check_tree, make_private_dirs
from zodex_system.secret_files import check_secret_file


@dataclass(frozen=True)
class LocalPaths:
    state: Path  # $XDG_STATE_HOME/zodex/local
    # Checked with the state (docs/security.md#state-directories), created elsewhere:
    config_dir: Path | None = None  # $XDG_CONFIG_HOME/zodex: local.toml names a command to run
    runtime_root: Path | None = None  # $XDG_RUNTIME_DIR/zodex: signing keys and sockets

    @classmethod
    def from_env(cls) -> LocalPaths:
        """Local's paths for this process's environment (zodex_system.xdg)."""
        return cls(xdg.local_state_dir(), xdg.config_dir(), xdg.runtime_root())

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
    def last_port(self) -> Path:
        """The MCP port the last runtime listened on, tried first at the next start
        (discovery.json is gone by then)."""
        return self.runtime / "mcp-port"

    @property
    def observer_bearer(self) -> Path:
        """The observer API's bearer secret; kept across restarts, replaced on rotation."""
        return self.runtime / "observer-bearer"

    @property
    def observer_steer(self) -> Path:
        """The steer token (``observer.steer``): new at each start, removed when off."""
        return self.runtime / "observer-steer"

    @property
    def session_key(self) -> Path:
        """The key that signs MCP session ids (docs/agents.md#identity); kept across restarts."""
        return self.runtime / "mcp-session-key"

    @property
    def secret_files(self) -> tuple[Path, ...]:
        """The text secrets kept here, which nothing stored or shown to viewers may hold."""
        return (self.token, self.observer_bearer, self.observer_steer, self.session_key)

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

    @property
    def state_base(self) -> Path:
        """``$XDG_STATE_HOME``: the top of the tree that must be the user's own."""
        return self.state.parent.parent

    def _own_dirs(self) -> tuple[Path, ...]:
        return (self.state, self.runtime, self.logs, self.spill, self.history)

    def verify(self) -> None:
        """Raise UnsafeDirectory, changing nothing, when a directory that holds Local's
        secrets or settings (or an ancestor up to its XDG base) belongs to someone else
        or is writable by group or others."""
        for directory in self._own_dirs():
            check_tree(directory, self.state_base)
        if self.config_dir is not None:
            check_tree(self.config_dir, self.config_dir.parent)
        if self.runtime_root is not None:
            check_tree(self.runtime_root, xdg.runtime_base(self.runtime_root))

    def create(self) -> None:
        """Every directory Local needs, private to the user (after :meth:`verify`), once the
        session key, trusted across restarts, is known to be safely the user's."""
        self.verify()
        check_secret_file(self.session_key)
        make_private_dirs(self._own_dirs(), self.state_base)
