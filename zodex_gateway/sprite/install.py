"""The code the agent account runs: a worker installation under ``sprite.install-dir``.

Workers run as the agent, so their code must be readable and runnable by it, and must not
be writable by it (docs/sprite.md#files-and-modes). The service's own Python often lives
where the agent cannot go (a pyenv build or a project venv under a ``0700`` home), so
``setup`` makes a small virtual environment from a Python the agent can run, with the same
major.minor version (the copied extension modules share the ABI within a minor version),
and copies into it the worker's packages and the distributions they import, as they are
installed here: the worker and the service always speak the same protocol version.

Everything is root-owned; files ``0644``, directories ``0755``; byte code is compiled at
install time because the agent cannot write ``__pycache__``.
"""

from __future__ import annotations

import compileall
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .accounts import AccountError
from .settings import WORKER_PYTHON

# The third-party distributions zodex_worker imports (zmq, msgpack; platformdirs through
# zodex_system.xdg). A missing one is caught by the import check below.
WORKER_DISTRIBUTIONS = ("pyzmq", "msgpack", "platformdirs")
# Found, not imported: the gateway never imports the worker (docs/architecture.md#layout).
WORKER_PACKAGES = ("zodex_protocol", "zodex_system", "zodex_worker")
CHECK_IMPORT = "import zodex_worker.main"


class InstallError(AccountError):
    """The agent cannot run the worker's code; one line saying how to fix it."""


def worker_python(install_dir: Path) -> Path:
    return install_dir / WORKER_PYTHON


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


def _copy_tree(source: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), symlinks=False)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise InstallError(f"package {name} is not installed with this zodex; reinstall zodex")
    return Path(next(iter(spec.submodule_search_locations)))


def _copy_distribution(name: str, site: Path) -> None:
    dist = importlib.metadata.distribution(name)
    tops = sorted({Path(str(f)).parts[0] for f in dist.files or ()} - {".."})
    for top in tops:
        source = Path(str(dist.locate_file(top)))
        target = site / top
        if source.is_dir():
            _copy_tree(source, target)
        elif source.is_file():
            shutil.copy2(source, target)


def _root_owned_readable(root: Path) -> None:
    for directory, dirs, files in os.walk(root):
        os.chown(directory, 0, 0, follow_symlinks=False)
        os.chmod(directory, 0o755)
        for name in files:
            path = Path(directory) / name
            os.chown(path, 0, 0, follow_symlinks=False)
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            os.chmod(path, mode)
        for name in dirs:
            path = Path(directory) / name
            if path.is_symlink():  # the venv's bin/python links: chown the link itself
                os.chown(path, 0, 0, follow_symlinks=False)


def install_worker(install_dir: Path, agent_user: str) -> Path:
    """Make or refresh the installation; returns the Python the worker runs with."""
    python = agent_python(agent_user)
    install_dir.parent.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(
        [str(python), "-m", "venv", "--without-pip", "--clear", str(install_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        reason = (made.stderr or made.stdout).strip().splitlines()
        raise InstallError(
            f"{python} -m venv {install_dir} failed: {reason[-1] if reason else made.returncode}; "
            "install the venv module (apt-get install python3-venv) and run setup again"
        )
    site = next((install_dir / "lib").glob("python3.*/site-packages"))
    for package in WORKER_PACKAGES:
        _copy_tree(_package_dir(package), site / package)
    for name in WORKER_DISTRIBUTIONS:
        _copy_distribution(name, site)
    compileall.compile_dir(str(site), quiet=2, workers=1)
    _root_owned_readable(install_dir)
    check_worker(install_dir, agent_user)
    return worker_python(install_dir)


def check_worker(install_dir: Path, agent_user: str) -> None:
    """The agent can import the worker with the installed Python, or InstallError says how to fix it."""
    python = worker_python(install_dir)
    done = run_as(agent_user, [str(python), "-I", "-c", CHECK_IMPORT])
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise InstallError(
            f"the agent account {agent_user} cannot run the worker ({python} -c '{CHECK_IMPORT}': "
            f"{lines[-1] if lines else f'exit {done.returncode}'}); make every directory above "
            f"{install_dir} searchable by others (chmod o+x) and run zodex sprite setup again"
        )


SERVICE_CHECK = "import zodex_gateway.sprite.service"


def service_problem(service_user: str) -> str | None:
    """Why the service account cannot run this installation of Zodex, or None.

    ``zodex sprite serve`` starts as root and then runs as the service account, which must
    still be able to read its own Python and packages (a pyenv build or a venv under a
    ``0700`` home is out of its reach)."""
    done = run_as(service_user, [sys.executable, "-I", "-c", SERVICE_CHECK])
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return (
        f"the service account {service_user} cannot run {sys.executable} "
        f"({lines[-1] if lines else f'exit {done.returncode}'}), so zodex sprite serve would fail once it "
        "drops root: install Zodex where every account can read it (e.g. python3 -m venv /opt/zodex-service, "
        "then /opt/zodex-service/bin/pip install zodex) and run that zodex's sprite setup"
    )
