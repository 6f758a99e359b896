"""Where Zodex keeps its files: the XDG base directories, resolved by one set of rules.

- configuration: ``$XDG_CONFIG_HOME/zodex`` (else ``~/.config/zodex``), docs/config.md;
- Local's state: ``$XDG_STATE_HOME/zodex/local`` (else ``~/.local/state/zodex/local``),
  docs/modes.md#local — a foreground gateway keeps its spill files and history there too;
- the runtime root: ``$XDG_RUNTIME_DIR/zodex`` when that directory exists, else
  ``/tmp/zodex-<uid>`` — or, when another account made that name first, a private
  ``/tmp/zodex-<uid>-<random>`` (docs/security.md#state-directories).

As the XDG spec says, an unset, empty or relative variable is ignored (and a relative
``HOME`` is taken as unset: the account's home from the password database). These are the
XDG paths on every POSIX system, macOS included (the docs promise them, not ``~/Library``).
Hand-written, a few lines: ``zodex local connect`` resolves them on its way to a client's
first answer, and a library for them costs more than the rest of that path.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/zodex``: ``local.toml``."""
    return _base("XDG_CONFIG_HOME", ".config") / "zodex"


def local_state_dir() -> Path:
    """``$XDG_STATE_HOME/zodex/local``: Local's state tree (runtime files, logs, spill, history)."""
    return _base("XDG_STATE_HOME", ".local/state") / "zodex" / "local"


def _base(variable: str, under_home: str) -> Path:
    value = os.environ.get(variable, "")
    return Path(value) if os.path.isabs(value) else _home() / under_home


def _home() -> Path:
    home = os.environ.get("HOME", "")
    return Path(home) if os.path.isabs(home) else Path(pwd.getpwuid(os.getuid()).pw_dir)


def runtime_root() -> Path:
    """Where runtime directories (signing keys, sockets, the worker registry) are made.

    Not the XDG library rule, which falls back to ``/run/user/<uid>`` and then
    to ``runtime-<uid>`` in the temporary directory, not to the documented ``/tmp/zodex-<uid>``."""
    base = _runtime_dir()
    if base is not None and base.is_dir():
        return base / "zodex"
    return private_temp_root()


def private_temp_root() -> Path:
    """``/tmp/zodex-<uid>``, made now if missing, when it is the user's own; else the user's
    own ``/tmp/zodex-<uid>-<random>`` (the first by name, or a new one).

    Any account may create names in a shared ``/tmp``: one that made ``zodex-<uid>`` first
    must neither be trusted with the runtime's key and sockets nor keep Zodex from starting.
    Only a real directory (not a link) the user owns, writable by nobody else, is used."""
    import tempfile  # here: only this fallback needs it

    temp = Path(tempfile.gettempdir())
    default = temp / f"zodex-{os.getuid()}"
    try:
        default.mkdir(mode=0o700)
    except OSError:
        pass  # exists already: someone's, looked at below
    if _own_private_dir(default, mode_mask=0o022):
        return default
    prefix = f"{default.name}-"
    try:
        names = sorted(name for name in os.listdir(temp) if name.startswith(prefix))
    except OSError:
        names = []
    for name in names:
        if _own_private_dir(temp / name, mode_mask=0o077):
            return temp / name
    return Path(tempfile.mkdtemp(prefix=prefix, dir=temp))  # 0700, a name nobody had


def _own_private_dir(path: Path, *, mode_mask: int) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & mode_mask


def runtime_base(root: Path) -> Path:
    """The XDG base a runtime root is checked up to (docs/security.md#state-directories):
    ``$XDG_RUNTIME_DIR`` for a root under it; the ``/tmp/zodex-<uid>`` fallback under a
    sticky ``/tmp`` is its own base."""
    base = _runtime_dir()
    return base if base is not None and root.parent == base else root


def _runtime_dir() -> Path | None:
    value = os.environ.get("XDG_RUNTIME_DIR", "")
    return Path(value) if os.path.isabs(value) else None
