"""The Zodex every account of a Sprite runs: a whole installation under ``sprite.install-dir``.

``zodex sprite serve`` starts as root and drops to the service account, and workers run
as the agent account; both import Python code after that, so the code must be readable
by them and writable by neither (docs/sprite.md#files-and-modes). The Python that ran
``setup`` often lives where they cannot go (a pyenv build or a project venv under root's
``0700`` home), so ``setup`` makes a virtual environment from a Python of the same
major.minor version that the accounts can run (extension modules share the ABI within a
minor version) and copies into it Zodex's packages and every distribution the installed
``zodex`` distribution requires, transitively (without extras, markers evaluated here), as
they are installed here: the service, its workers and the operator's commands are the very
same code. ``<install-dir>/bin/zodex`` runs it; the unit runs that.

Everything is root-owned; files ``0644`` (``0755`` when executable), directories
``0755``; byte code is compiled at install time because no account can write
``__pycache__``. The new installation is built beside the old one and swapped in only once
both accounts have imported from it, so a failed refresh leaves the old one working.
"""

from __future__ import annotations

import compileall
import importlib.metadata
import importlib.util
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from .accounts import AccountError
from .settings import INSTALLED_ZODEX, WORKER_PYTHON

DISTRIBUTION = "zodex"
# Zodex's own packages, found by import (an editable install keeps them outside
# site-packages, where its distribution's file list does not name them).
ZODEX_PACKAGES = ("zodex_protocol", "zodex_system", "zodex_worker", "zodex_gateway")
WORKER_CHECK = "import zodex_worker.main"
# What serve imports, and the modules its first calls load lazily.
SERVICE_CHECK = "import zodex_gateway.cli, zodex_gateway.sprite.service, concurrent.futures.thread"
INSTALLER = "zodex sprite setup\n"


class InstallError(AccountError):
    """The accounts cannot run the installed Zodex; one line saying how to fix it."""


@dataclass(frozen=True)
class Installed:
    python: Path  # the base Python the installation was made from
    zodex: Path  # <install-dir>/bin/zodex
    distributions: int  # copied besides zodex itself


def worker_python(install_dir: Path) -> Path:
    return install_dir / WORKER_PYTHON


def zodex_command(install_dir: Path) -> Path:
    return install_dir / INSTALLED_ZODEX


def run_as(user: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` as ``user`` with root's environment dropped, from ``/`` (root's working
    directory may be closed to the user)."""
    return subprocess.run(
        ["runuser", "-u", user, "--", "/usr/bin/env", "-i", "PATH=/usr/bin:/bin", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        timeout=60,
    )


def _candidates() -> list[Path]:
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = [
        Path(os.path.realpath(sys.executable)),
        Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable))),
    ]
    found += [Path(f"/usr/bin/{minor}"), Path(f"/usr/local/bin/{minor}")]
    return list(dict.fromkeys(path for path in found if path.is_file()))


def agent_python(agent_user: str) -> Path:
    """The first Python of this minor version that the agent can run."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    probe = "import sys; print('%d.%d' % sys.version_info[:2])"
    for python in _candidates():
        done = run_as(agent_user, [str(python), "-c", probe])
        if done.returncode == 0 and done.stdout.strip() == version:
            return python
    raise InstallError(
        f"the agent account {agent_user} can run no Python {version} (tried "
        f"{', '.join(map(str, _candidates())) or 'none'}): install one it can reach, e.g. "
        f"apt-get install python{version}, then run zodex sprite setup again"
    )


def check_install_dir(install_dir: Path) -> None:
    """Root runs this code (the unit's ``ExecStart``), so no other account may be able to
    swap it: the directory is a real one, and every directory above it is root's and closed
    to others, or sticky like ``/tmp`` (where only its owner may rename an entry)."""
    if install_dir.is_symlink() or (install_dir.exists() and not install_dir.is_dir()):
        raise InstallError(f"{install_dir} exists and is not a directory; move it away and run setup again")
    above = [*install_dir.parents, *Path(os.path.realpath(install_dir.parent)).parents]
    above.append(Path(os.path.realpath(install_dir.parent)))
    for directory in dict.fromkeys(above):
        try:
            info = os.stat(directory)
        except FileNotFoundError:
            continue  # made by setup, root's and 0755
        mode = stat.S_IMODE(info.st_mode)
        if info.st_uid != 0 or (mode & 0o022 and not mode & stat.S_ISVTX):
            raise InstallError(
                f"sprite.install-dir {install_dir}: {directory} (uid {info.st_uid}, mode {mode:04o}) lets "
                "an account other than root replace the code root runs; choose a directory whose every "
                "parent is root's and writable by root only"
            )


# ---- what to copy --------------------------------------------------------------------------


def requirement_closure(name: str = DISTRIBUTION) -> list[importlib.metadata.Distribution]:
    """Every distribution ``name`` requires, transitively, as installed here. Requirements
    of ``name``'s own extras (``test``) and those whose markers do not apply on this host are
    left out; a requirement naming extras (``pyjwt[crypto]``) brings in what they require."""
    found: dict[str, importlib.metadata.Distribution] = {}
    walked: set[tuple[str, str]] = set()
    wanted: list[tuple[str, str, str]] = [(name, "", name)]  # (distribution, extra, required by)
    while wanted:
        wanted_name, extra, by = wanted.pop()
        key = canonicalize_name(wanted_name)
        if (key, extra) in walked:
            continue
        walked.add((key, extra))
        dist = found.get(key)
        if dist is None:
            try:
                dist = found[key] = importlib.metadata.distribution(wanted_name)
            except importlib.metadata.PackageNotFoundError:
                raise InstallError(
                    f"{by} requires {wanted_name}, which is not installed with this zodex: reinstall "
                    "zodex (./scripts/setup.sh) and run zodex sprite setup again"
                ) from None
        for line in dist.requires or ():
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                raise InstallError(f"{by}: cannot read its requirement {line!r}") from None
            if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                wanted += [(requirement.name, more, wanted_name) for more in ("", *requirement.extras)]
    return [dist for key, dist in sorted(found.items()) if key != canonicalize_name(name)]


def _copy_distribution(dist: importlib.metadata.Distribution, site: Path) -> None:
    """The files its installation record lists under site-packages (its console scripts,
    outside it, are left out), byte code included."""
    files = dist.files
    if files is None:
        raise InstallError(
            f"{dist.metadata['Name']} is installed without a file list (RECORD): reinstall it with pip "
            "and run zodex sprite setup again"
        )
    made: set[Path] = set()
    for entry in files:
        relative = Path(str(entry))
        if relative.is_absolute() or ".." in relative.parts:
            continue
        source = Path(str(dist.locate_file(entry)))
        if source.is_file():
            target = site / relative
            if target.parent not in made:
                target.parent.mkdir(parents=True, exist_ok=True)
                made.add(target.parent)
            shutil.copy2(source, target)  # keeps mtimes: the copied byte code stays valid


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise InstallError(f"package {name} is not installed with this zodex; reinstall zodex")
    return Path(next(iter(spec.submodule_search_locations)))


def _copy_zodex(site: Path) -> importlib.metadata.Distribution:
    """Zodex's packages, and a ``.dist-info`` of its own: its metadata (the version the
    service reports, the requirements a later setup walks) and entry points."""
    dist = importlib.metadata.distribution(DISTRIBUTION)
    for package in ZODEX_PACKAGES:
        shutil.copytree(
            _package_dir(package),
            site / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            symlinks=False,
        )
    info = site / f"{DISTRIBUTION}-{dist.version}.dist-info"
    info.mkdir()
    metadata = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    if not metadata:
        raise InstallError("the zodex distribution has no metadata; reinstall zodex")
    (info / "METADATA").write_text(metadata)
    (info / "entry_points.txt").write_text(dist.read_text("entry_points.txt") or "")
    (info / "INSTALLER").write_text(INSTALLER)
    return dist


def _command_script(install_dir: Path, dist: importlib.metadata.Distribution) -> str:
    """``bin/zodex``: the console script, run by the installed Python in isolated mode
    (no ``PYTHON*`` variables, no user site, no working directory on the path)."""
    entry = next(
        (ep for ep in dist.entry_points if ep.group == "console_scripts" and ep.name == "zodex"), None
    )
    if entry is None:
        raise InstallError("the zodex distribution has no zodex console script; reinstall zodex")
    module, _, function = entry.value.partition(":")
    command = zodex_command(install_dir)
    code = (
        f"import sys; sys.argv[0] = {json.dumps(str(command))}; "  # printed commands name this zodex
        f"from {module} import {function}; sys.exit({function}())"
    )
    return (
        "#!/bin/sh\n"
        "# Zodex for every account of this Sprite; `zodex sprite setup` rewrites it.\n"
        f'exec {shlex.quote(str(worker_python(install_dir)))} -I -c {shlex.quote(code)} "$@"\n'
    )


# ---- making it -----------------------------------------------------------------------------


def _root_owned_readable(root: Path) -> None:
    for directory, dirs, files in os.walk(root):
        os.chown(directory, 0, 0, follow_symlinks=False)
        os.chmod(directory, 0o755)
        for name in files:
            path = Path(directory) / name
            if path.is_symlink():  # the venv's bin/python links: chown the link itself
                os.chown(path, 0, 0, follow_symlinks=False)
                continue
            os.chown(path, 0, 0)
            executable = path.stat().st_mode & stat.S_IXUSR
            os.chmod(path, 0o755 if executable else 0o644)
        for name in dirs:
            path = Path(directory) / name
            if path.is_symlink():
                os.chown(path, 0, 0, follow_symlinks=False)


def _make_venv(python: Path, target: Path) -> None:
    made = subprocess.run(
        [str(python), "-m", "venv", "--without-pip", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        reason = (made.stderr or made.stdout).strip().splitlines()
        raise InstallError(
            f"{python} -m venv {target} failed: {reason[-1] if reason else made.returncode}; "
            "install the venv module (apt-get install python3-venv) and run setup again"
        )


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def install_zodex(install_dir: Path, agent_user: str, service_user: str) -> Installed:
    """Make or refresh the installation; checked as both accounts before it replaces the
    previous one."""
    python = agent_python(agent_user)
    closure = requirement_closure()
    install_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    staging = install_dir.with_name(f".{install_dir.name}.new")
    retired = install_dir.with_name(f".{install_dir.name}.old")
    _remove(staging)  # left by an interrupted setup
    try:
        _make_venv(python, staging)
        site = next((staging / "lib").glob("python3.*/site-packages"))
        zodex = _copy_zodex(site)
        for dist in closure:
            _copy_distribution(dist, site)
        compileall.compile_dir(str(site), quiet=2, workers=1)
        (staging / INSTALLED_ZODEX).write_text(_command_script(install_dir, zodex))
        (staging / INSTALLED_ZODEX).chmod(0o755)
        _root_owned_readable(staging)
        check_imports(
            staging, [(agent_user, WORKER_CHECK, "the worker"), (service_user, SERVICE_CHECK, "serve")]
        )
        _remove(retired)
        if install_dir.exists():
            os.rename(install_dir, retired)
        os.rename(staging, install_dir)
    finally:
        _remove(staging)
        _remove(retired)
    return Installed(python, zodex_command(install_dir), len(closure))


def check_imports(install_dir: Path, checks: list[tuple[str, str, str]]) -> None:
    """Each ``(user, statement, what)``: ``user`` runs ``statement`` with the installed
    Python (side by side: each start costs most of a second), or InstallError says how to
    fix it."""
    python = worker_python(install_dir)
    with ThreadPoolExecutor(len(checks)) as pool:
        results = list(pool.map(lambda c: run_as(c[0], [str(python), "-I", "-c", c[1]]), checks))
    for (user, statement, what), done in zip(checks, results, strict=True):
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            raise InstallError(
                f"the account {user} cannot run {what} ({python} -I -c '{statement}': "
                f"{lines[-1] if lines else f'exit {done.returncode}'}); make every directory above "
                f"{install_dir.parent} searchable by others (chmod o+x) and run zodex sprite setup again"
            )
