"""Acting as a second local account in tests: ``nobody`` through ``setpriv``.

Security tests check what another user of the machine can and cannot do to Zodex's files,
sockets and processes. The suite runs as root in CI, so the second account is ``nobody``
reached with ``setpriv --reuid=nobody --regid=nogroup --clear-groups``.

- :func:`require_second_user` — call first in such a test: as root it *fails* the test when
  setpriv does not give uid ``nobody`` (a broken check must not pass silently in CI); when
  not root it skips, since only root can switch users.
- :func:`run_as_second_user` — ``subprocess.run`` through setpriv (text mode, output
  captured, a timeout, ``cwd="/"`` unless given: the caller's directory may be under a
  ``0700`` home). The command is started by ``/usr/bin/env`` as ``nobody``: setpriv itself
  still holds root's capabilities when it looks up the program, so ``setpriv … /root/x``
  would run a program ``nobody`` cannot reach.
- :func:`world_tree` / :func:`world_tree_dir` / the ``second_user_tree`` fixture — a fresh
  ``0755`` directory under ``/tmp`` whose every ancestor ``nobody`` can traverse (pytest's
  ``tmp_path`` lives under ``/tmp/pytest-of-root``, which pytest keeps ``0700``, so it cannot be
  used). :func:`hand_to_second_user` gives a path in it to ``nobody:nogroup``.
- :func:`second_user_python` — the argv prefix of a Python that ``nobody`` can run with the
  project importable.

How the second user's Python is found: the test interpreter itself often lives where
``nobody`` cannot go (a pyenv build or a project venv under a ``0700`` home), so the
interpreter is the first of the real test interpreter, its base executable and
``/usr/bin/python3.X`` / ``/usr/local/bin/python3.X`` that ``nobody`` can run and that has
the same major.minor version (extension modules share the ABI within a minor version).
The packages come through ``PYTHONPATH``: the project root (for ``zodex_*`` and
``tests``) and the test interpreter's site-packages. A directory ``nobody`` cannot read is
first staged under ``/tmp`` as a tree of hard links (a copy where linking fails), removed
when the test process exits. The prefix is ``env PYTHONPATH=… PYTHONDONTWRITEBYTECODE=1
<python> -s``, so it composes with any ``env=`` a caller passes.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SECOND_USER = "nobody"
SECOND_GROUP = "nogroup"
# setpriv keeps root's capabilities until its own execve, so the path of the program it
# starts is looked up as root: /usr/bin/env (which nobody can run) makes that lookup, and
# every later one, happen as nobody.
SETPRIV = [
    "setpriv",
    f"--reuid={SECOND_USER}",
    f"--regid={SECOND_GROUP}",
    "--clear-groups",
    "/usr/bin/env",
    "--",
]
DEFAULT_TIMEOUT = 60.0

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_STAGE_SKIP = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def second_user_ids() -> tuple[int, int]:
    """(uid, gid) of the second account."""
    import grp
    import pwd

    return pwd.getpwnam(SECOND_USER).pw_uid, grp.getgrnam(SECOND_GROUP).gr_gid


def require_second_user() -> None:
    """Skip unless root; as root, fail unless setpriv really runs commands as ``nobody``."""
    if os.geteuid() != 0:
        pytest.skip("acting as a second local user needs root (setpriv --reuid=nobody)")
    _check_setpriv()


@functools.cache
def _setpriv_problem() -> str | None:
    try:
        uid, _gid = second_user_ids()
    except KeyError as error:
        return f"no account for the second user: {error}"
    try:
        done = subprocess.run(
            [*SETPRIV, "id", "-u"], capture_output=True, text=True, timeout=DEFAULT_TIMEOUT, cwd="/"
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"cannot run setpriv: {error}"
    if done.returncode != 0 or done.stdout.strip() != str(uid):
        return (
            f"setpriv did not run `id -u` as {uid}: exit {done.returncode}, {done.stdout!r} {done.stderr!r}"
        )
    return None


def _check_setpriv() -> None:
    problem = _setpriv_problem()
    if problem is not None:
        pytest.fail(f"the second-user test helper does not work as root: {problem}")


def run_as_second_user(argv: list[str], **subprocess_kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(argv)`` as ``nobody``; keyword arguments override the defaults."""
    kwargs: dict[str, Any] = {"text": True, "timeout": DEFAULT_TIMEOUT, "cwd": "/"}
    if not {"stdout", "stderr", "capture_output"} & subprocess_kwargs.keys():
        kwargs["capture_output"] = True
    kwargs.update(subprocess_kwargs)
    return subprocess.run([*SETPRIV, *argv], **kwargs)


def popen_as_second_user(argv: list[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(argv)`` as ``nobody`` (``cwd="/"`` unless given)."""
    popen_kwargs.setdefault("cwd", "/")
    return subprocess.Popen([*SETPRIV, *argv], **popen_kwargs)


def world_tree(tmp_path: Path) -> Path:
    """A fresh ``0755`` directory under ``/tmp`` that ``nobody`` can reach.

    Removed when the test process exits; prefer the ``second_user_tree`` fixture or
    :func:`world_tree_dir`, which remove it when the test ends. ``tmp_path`` only names it.
    """
    path = _make_world_dir(tmp_path.name)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@contextlib.contextmanager
def world_tree_dir(label: str = "tree") -> Iterator[Path]:
    """:func:`world_tree` as a context manager that removes the tree on exit."""
    path = _make_world_dir(label)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _make_world_dir(label: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in label)[:40]
    path = Path(tempfile.mkdtemp(prefix=f"zodex-world-{safe}-", dir="/tmp"))
    path.chmod(0o755)  # mkdtemp makes it 0700
    return path


def hand_to_second_user(path: Path) -> Path:
    """chown ``path`` to ``nobody:nogroup`` (root only); returns it."""
    uid, gid = second_user_ids()
    os.chown(path, uid, gid)
    return path


def second_user_python() -> list[str]:
    """argv prefix of a Python ``nobody`` can run with the project's packages importable."""
    require_second_user()
    prefix = _second_user_python()
    if isinstance(prefix, str):
        pytest.fail(f"no Python for the second user: {prefix}")
    return list(prefix)


@functools.cache
def _second_user_python() -> tuple[str, ...] | str:
    interpreter = _interpreter_for_second_user()
    if interpreter is None:
        version = _python_version()
        return f"nobody cannot run any Python {version} (tried {', '.join(_interpreter_candidates())})"
    paths = [str(_PROJECT_ROOT)]
    for key in ("purelib", "platlib"):
        site = sysconfig.get_paths()[key]
        if site not in paths and os.path.isdir(site):
            paths.append(site)
    readable = [path if _second_user_can_read(path) else str(_stage(path)) for path in paths]
    prefix = (
        "/usr/bin/env",
        f"PYTHONPATH={os.pathsep.join(readable)}",
        "PYTHONDONTWRITEBYTECODE=1",
        interpreter,
        "-s",
    )
    probe = run_as_second_user([*prefix, "-c", "import zodex_worker, zmq, msgpack; print('ok')"])
    if probe.stdout.strip() != "ok":
        return f"{' '.join(prefix)} cannot import the project as nobody: {probe.stderr.strip()}"
    return prefix


def _python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _interpreter_candidates() -> list[str]:
    version = _python_version()
    found = [
        os.path.realpath(sys.executable),
        os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
        f"/usr/bin/python{version}",
        f"/usr/local/bin/python{version}",
    ]
    return [path for index, path in enumerate(found) if path not in found[:index] and os.path.exists(path)]


def _interpreter_for_second_user() -> str | None:
    want = _python_version()
    for candidate in _interpreter_candidates():
        done = run_as_second_user(
            [candidate, "-s", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
        )
        if done.returncode == 0 and done.stdout.strip() == want:
            return candidate
    return None


def _second_user_can_read(path: str) -> bool:
    done = run_as_second_user(["/bin/sh", "-c", 'test -r "$1" && test -x "$1"', "sh", path])
    return done.returncode == 0


@functools.cache
def _stage_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="zodex-second-user-python-", dir="/tmp"))
    root.chmod(0o755)
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def _stage(path: str) -> Path:
    """A ``nobody``-readable twin of ``path`` made of hard links (copies across devices)."""
    dest = _stage_root() / f"{len(list(_stage_root().iterdir()))}-{os.path.basename(path)}"
    shutil.copytree(
        path,
        dest,
        symlinks=True,
        copy_function=_link_or_copy,
        ignore=lambda _dir, names: [name for name in names if name in _STAGE_SKIP],
    )
    for directory, _subdirs, _files in os.walk(dest):
        os.chmod(directory, 0o755)
    return dest


def _link_or_copy(source: str, dest: str) -> None:
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)
