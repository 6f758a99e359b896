"""Fleet hosts as separate machines on one machine (root only), shared by the fleet tests
(``tests/fleet``, ``tests/support/accounts.py``) and ``scripts/bench.py``.

Each host runs in its own network namespace, joined to the root namespace by a veth pair
with link-local ``169.254.x.y/30`` addresses, as a real ``zodex host serve`` with
throwaway service and agent accounts; gateways are real ``zodex gateway serve`` processes
in the root namespace, on loopback. Every context manager here removes what it made
(namespaces, links, accounts and their processes, directories) whatever happens.

Nothing here depends on pytest: what cannot be set up raises :class:`Unavailable` with the
reason, which tests turn into a skip and the bench prints.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx2

from zodex_gateway.fleet import keys
from zodex_gateway.sprite.accounts import Account, lookup_user

PROJECT_ROOT = Path(__file__).resolve().parents[1]
HOST_PORT = 7700


class Unavailable(Exception):
    """This machine cannot run the fleet (not root, no ``ip``, no namespaces, …)."""


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Bounded wait for a condition that has no event to wait on."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# ---- accounts --------------------------------------------------------------------------


def processes_of(uid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as status:
                for line in status:
                    if line.startswith(b"State:") and b"Z" in line.split()[1]:
                        break
                    if line.startswith(b"Uid:"):
                        if uid in (int(line.split()[1]), int(line.split()[2])):
                            found.append(int(entry.name))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return found


def kill_processes_of(uid: int) -> None:
    for _ in range(20):
        left = processes_of(uid)
        if not left:
            return
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not processes_of(uid), timeout=2.0, what="the account's processes to go")


# What a throwaway account's name looks like: tests running beside a test that counts the
# machine's accounts make and remove these (``<prefix><8 hex digits>``).
THROWAWAY_NAME = re.compile(r"z[a-z]{1,3}[0-9a-f]{8}")


@contextlib.contextmanager
def throwaway_account(prefix: str = "zt", *, shell: str = "/bin/bash") -> Iterator[Account]:
    """An account with a unique name (``<prefix><random>``), its own group and a home;
    removed, after every process it runs is killed, whatever happens."""
    if os.geteuid() != 0:
        raise Unavailable("making throwaway accounts needs root")
    name = f"{prefix}{secrets.token_hex(4)}"
    subprocess.run(
        ["useradd", "--create-home", "--user-group", "--shell", shell, name],
        check=True,
        capture_output=True,
    )
    try:
        account = lookup_user(name)
        assert account is not None, f"useradd made no {name}"
        yield account
    finally:
        with contextlib.suppress(KeyError):
            kill_processes_of(pwd.getpwnam(name).pw_uid)
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)
        subprocess.run(["groupdel", name], capture_output=True, check=False)


def install_python() -> str:
    """The system Python of this interpreter's version, which other accounts can run."""
    base = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.access(base, os.X_OK):
        raise Unavailable(f"no {base} that other accounts can run")
    return base


def _others_can_enter(path: Path) -> bool:
    """Whether every directory down to ``path`` lets other accounts through (modes only)."""
    return all(os.stat(part).st_mode & stat.S_IXOTH for part in [path, *path.parents])


@functools.cache
def reachable(path: str) -> str:
    """``path``, or where other accounts can reach it: a clone under a ``0700`` directory
    (``mktemp -d``) is staged once under ``/tmp`` as hard links (copies across devices),
    removed when this process exits."""
    if _others_can_enter(Path(path)):
        return path
    staged = Path(tempfile.mkdtemp(prefix="zodex-staged-", dir="/tmp"))
    atexit.register(shutil.rmtree, staged, ignore_errors=True)
    dest = staged / os.path.basename(path)
    shutil.copytree(
        path,
        dest,
        symlinks=True,
        copy_function=_link_or_copy,
        ignore=shutil.ignore_patterns("__pycache__", ".git", "node_modules", ".cache", ".venv"),
    )
    for directory, _subdirs, _files in os.walk(staged):
        os.chmod(directory, 0o755)
    return str(dest)


def _link_or_copy(source: str, dest: str) -> None:
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


@contextlib.contextmanager
def runnable_install() -> Iterator[Path]:
    """A venv under ``/tmp`` every account can run, with the project and this
    interpreter's packages importable through a ``.pth`` file (what ``zodex sprite setup``
    installs, made in a second instead of copied); yields its directory."""
    base = install_python()
    root = Path(tempfile.mkdtemp(prefix="zodex-install-", dir="/tmp"))
    root.chmod(0o755)
    try:
        venv = root / "venv"
        subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
        site = next((venv / "lib").glob("python3.*/site-packages"))
        found = [str(PROJECT_ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
        paths = [reachable(path) for path in dict.fromkeys(found)]
        (site / "zodex-tests.pth").write_text("\n".join(dict.fromkeys(paths)) + "\n")
        for directory, _subdirs, files in os.walk(root):
            os.chmod(directory, 0o755)
            for name in files:
                path = os.path.join(directory, name)
                if not os.path.islink(path):
                    os.chmod(path, 0o755)
        yield venv
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---- network namespaces ----------------------------------------------------------------


def netns_unavailable() -> str | None:
    """Why hosts cannot be put in network namespaces here, or None if they can."""
    if os.geteuid() != 0:
        return "hosts run in network namespaces with throwaway accounts: needs root"
    if shutil.which("ip") is None:
        return "hosts run in network namespaces: needs iproute2's ip"
    probe = f"zxp{secrets.token_hex(3)}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    if done.returncode != 0:
        return f"network namespaces are unavailable here: {done.stderr.strip()}"
    return None


def _ip(*args: str, netns: str | None = None) -> None:
    argv = ["ip", "netns", "exec", netns, "ip", *args] if netns else ["ip", *args]
    subprocess.run(argv, check=True, capture_output=True, text=True)


def _used_addresses() -> str:
    return subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True, check=True).stdout


@dataclass
class Namespace:
    name: str
    root_link: str
    root_address: str
    host_address: str


@contextlib.contextmanager
def namespace() -> Iterator[Namespace]:
    """A network namespace with a veth pair to the root namespace: ``169.254.x.(y+1)`` on
    the root side, ``169.254.x.(y+2)`` inside, a ``/30`` nobody else on this machine uses."""
    used = _used_addresses()
    while True:
        x, y = secrets.randbelow(253) + 1, secrets.randbelow(64) * 4
        if f"169.254.{x}." not in used:
            break
    tag = secrets.token_hex(3)
    ns = Namespace(f"zx{tag}", f"zxr{tag}", f"169.254.{x}.{y + 1}", f"169.254.{x}.{y + 2}")
    try:
        _ip("netns", "add", ns.name)
        _ip("link", "add", ns.root_link, "type", "veth", "peer", "name", f"zxh{tag}")
        _ip("link", "set", f"zxh{tag}", "netns", ns.name)
        _ip("addr", "add", f"{ns.root_address}/30", "dev", ns.root_link)
        _ip("link", "set", ns.root_link, "up")
        _ip("addr", "add", f"{ns.host_address}/30", "dev", f"zxh{tag}", netns=ns.name)
        _ip("link", "set", f"zxh{tag}", "up", netns=ns.name)
        _ip("link", "set", "lo", "up", netns=ns.name)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns.name], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", ns.root_link], capture_output=True, check=False)


# ---- hosts and gateways ----------------------------------------------------------------


def zodex_argv(python: Path, *args: str) -> list[str]:
    """``zodex <args>`` run by ``python`` (a runnable install has no console scripts)."""
    return [
        str(python),
        "-c",
        "import sys; from zodex_gateway.cli import main; sys.argv[0] = 'zodex'; main()",
        *args,
    ]


def stop_process(process: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> None:
    """Stop ``process`` with ``sig`` (continuing it first, if it was frozen); killed if it is
    still there after 30 s."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGCONT)
        process.send_signal(sig)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _spawn(argv: list[str], stderr: Path) -> subprocess.Popen[bytes]:
    # stderr goes to a file, not a pipe nobody reads: a long run (the bench) would fill a
    # pipe and block the process on its next log line.
    with stderr.open("ab") as err:
        return subprocess.Popen(
            argv,
            env={"PATH": "/usr/bin:/bin", "HOME": "/root"},
            cwd="/",
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def _exited(what: str, stderr: Path) -> AssertionError:
    return AssertionError(f"{what} exited: {stderr.read_text(errors='replace')}")


@dataclass
class Host:
    name: str
    ns: Namespace
    service: Account
    agent: Account
    base: Path
    python: Path
    gateway_keys: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.ns.host_address}:{HOST_PORT}"

    @property
    def state_dir(self) -> Path:
        return self.base / "state"

    @property
    def workspace(self) -> Path:
        return self.base / "workspace"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / "host.log"

    @property
    def keys_dir(self) -> Path:
        return self.base / "keys"

    @property
    def stderr_file(self) -> Path:
        return self.base / "host.stderr"

    def log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def write_config(self) -> Path:
        config = self.base / "host.toml"
        config.write_text(
            "\n".join([
                "[host]",
                f'name = "{self.name}"',
                f'endpoint = "{self.endpoint}"',
                f'secret-key = "{self.keys_dir / "host.key"}"',
                f'signing-key = "{self.keys_dir / "host.signing"}"',
                f'gateway-keys = "{self.gateway_keys}"',
                "[sprite]",
                f'service-user = "{self.service.name}"',
                f'agent-user = "{self.agent.name}"',
                f'group = "{self.service.name}"',
                f'workspace = "{self.workspace}"',
                f'state-dir = "{self.state_dir}"',
                f'runtime-dir = "{self.base / "run"}"',
                f'install-dir = "{self.python.parent.parent}"',
            ])
            + "\n"
        )  # fmt: skip
        return config

    def start(self) -> None:
        starts = self.log().count(" serving on ")
        argv = [
            "ip",
            "netns",
            "exec",
            self.ns.name,
            *zodex_argv(self.python, "host", "serve", "--config", str(self.base / "host.toml")),
        ]
        # `ip netns exec` enters the namespace and execs the command: the pid is the host's.
        self.process = _spawn(argv, self.stderr_file)

        def serving() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise _exited("zodex host serve", self.stderr_file)
            return self.log().count(" serving on ") > starts

        wait_until(serving, timeout=30, what=f"host {self.name} to serve")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_process(self.process, sig)


@contextlib.contextmanager
def fleet_host(name: str, python: Path, gateway_keys: Path) -> Iterator[Host]:
    """A started host called ``name`` in a namespace of its own, its accounts, directories
    and keys (``keys/host.{key,pub,signing,mcp}``), accepting the gateways whose ``*.pub``
    are in ``gateway_keys``."""
    with (
        namespace() as ns,
        throwaway_account("zs", shell="/usr/sbin/nologin") as service,
        throwaway_account("za") as agent,
    ):
        base = Path(tempfile.mkdtemp(prefix=f"zodex-host-{name}-", dir="/tmp"))
        base.chmod(0o755)
        host = Host(name, ns, service, agent, base, python, gateway_keys)
        try:
            host.state_dir.mkdir(mode=0o700)
            os.chown(host.state_dir, service.uid, service.gid)
            host.workspace.mkdir(mode=0o750)
            os.chown(host.workspace, agent.uid, agent.gid)
            host.keys_dir.mkdir(mode=0o700)
            keys.keygen(host.keys_dir, "host")
            keys.keygen(host.keys_dir, "host", "signing")
            keys.keygen(host.keys_dir, "host", "mcp")
            host.write_config()
            host.start()
            yield host
        finally:
            host.stop()
            shutil.rmtree(base, ignore_errors=True)


@dataclass
class Gateway:
    config: Path
    python: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stderr_file(self) -> Path:
        return self.config.with_suffix(".stderr")

    def start(self) -> None:
        argv = zodex_argv(self.python, "gateway", "serve", "--config", str(self.config))
        self.process = _spawn(argv, self.stderr_file)

        def healthy() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise _exited("zodex gateway serve", self.stderr_file)
            try:
                return httpx2.get(f"{self.url}/health", timeout=2).status_code == 200
            except httpx2.HTTPError:
                return False

        wait_until(healthy, timeout=30, what="the gateway to answer /health")

    def stop(self) -> None:
        stop_process(self.process)

    def restart(self) -> None:
        self.stop()
        self.start()


def write_gateway_config(path: Path, secret: Path, hosts: list[Host], port: int) -> None:
    lines = ["[gateway]", 'address = "127.0.0.1"', f"port = {port}", f'secret-key = "{secret}"']
    for host in hosts:
        lines += [
            "[[hosts]]",
            f'name = "{host.name}"',
            f'endpoint = "{host.endpoint}"',
            f'public-key = "{host.keys_dir / "host.pub"}"',
            f'signing-key = "{host.keys_dir / "host.signing"}"',
            f'mcp-key = "{host.keys_dir / "host.mcp"}"',
            f'workspace = "{host.workspace}"',
        ]
    path.write_text("\n".join(lines) + "\n")


def mcp_key(host: Host) -> str:
    return (host.keys_dir / "host.mcp").read_text().strip()


# ---- a Sprite service (the single-machine counterpart of a host behind a gateway) -------


@dataclass
class SpriteService:
    service: Account
    agent: Account
    base: Path
    python: Path
    key: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def workspace(self) -> Path:
        return self.base / "workspace"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stderr_file(self) -> Path:
        return self.base / "sprite.stderr"

    def start(self) -> None:
        config = self.base / "etc" / "config.toml"
        self.process = _spawn(
            zodex_argv(self.python, "sprite", "serve", "--config", str(config)), self.stderr_file
        )

        def healthy() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise _exited("zodex sprite serve", self.stderr_file)
            try:
                return httpx2.get(f"{self.url}/health", timeout=2).status_code == 200
            except httpx2.HTTPError:
                return False

        wait_until(healthy, timeout=30, what="the Sprite service to answer /health")

    def stop(self) -> None:
        stop_process(self.process)


@contextlib.contextmanager
def sprite_service(python: Path) -> Iterator[SpriteService]:
    """A started ``zodex sprite serve`` on loopback with its own throwaway accounts, config,
    state and key in a temporary directory (never ``/etc``)."""
    from zodex_gateway.sprite.key import new_key, write_key

    with (
        throwaway_account("zs", shell="/usr/sbin/nologin") as service,
        throwaway_account("za") as agent,
    ):
        base = Path(tempfile.mkdtemp(prefix="zodex-sprite-", dir="/tmp"))
        base.chmod(0o755)
        sprite = SpriteService(service, agent, base, python, new_key())
        try:
            (base / "etc").mkdir(mode=0o755)
            state = base / "state"
            state.mkdir(mode=0o700)
            os.chown(state, service.uid, service.gid)
            sprite.workspace.mkdir(mode=0o750)
            os.chown(sprite.workspace, agent.uid, agent.gid)
            write_key(state / "key", sprite.key, service.uid, service.gid)
            config = base / "etc" / "config.toml"
            config.write_text(
                "\n".join([
                    "[sprite]",
                    'address = "127.0.0.1"',
                    f"port = {sprite.port}",
                    f'service-user = "{service.name}"',
                    f'agent-user = "{agent.name}"',
                    f'group = "{service.name}"',
                    f'workspace = "{sprite.workspace}"',
                    f'state-dir = "{state}"',
                    f'runtime-dir = "{base / "run"}"',
                    f'install-dir = "{python.parent.parent}"',
                ])
                + "\n"
            )  # fmt: skip
            os.chown(config, 0, service.gid)
            config.chmod(0o640)
            sprite.start()
            yield sprite
        finally:
            sprite.stop()
            shutil.rmtree(base, ignore_errors=True)
