"""``zodex sprite serve``: the Sprite service in the foreground (docs/sprite.md#the-service).

It starts as root and, before it listens to anyone, checks everything it needs (the
accounts, the key, that the agent can run the worker), binds its socket, loads its TLS
certificate, and makes its runtime directory. Then it forks the root helper
(:mod:`zodex_gateway.sprite.helper`), drops to the service account for good, and serves MCP
over HTTP until SIGTERM or SIGINT. Stopping stops the workers, then has the helper kill
every process of the agent account (docs/sprite.md#privilege-separation).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import grp
import json
import logging
import logging.handlers
import os
import pwd
import secrets
import shutil
import socket
import ssl
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zodex_gateway.agents.session_ids import SessionIds
from zodex_gateway.config.package_version import zodex_version
from zodex_gateway.mcp.mode import Mode
from zodex_gateway.mcp.tool_dispatcher import ToolDispatcher
from zodex_gateway.redaction import SECRETS
from zodex_gateway.serve.mcp_http import McpHttpApp
from zodex_gateway.serve.running import Serve, StopSignal, serve_until_stopped
from zodex_gateway.sprite.agent_processes import AgentAccount
from zodex_gateway.sprite.auth import KeySource, SpriteFront
from zodex_gateway.sprite.environment import COMMAND_SHELL, agent_environment
from zodex_gateway.sprite.helper import Helper, HelperConfig
from zodex_gateway.sprite.key import KeyRefused, read_key
from zodex_gateway.sprite.launcher import HelperLauncher, stop_on_helper_loss
from zodex_gateway.sprite.reach import unreadable_import_root
from zodex_gateway.sprite.settings import SpriteSettings
from zodex_gateway.sprite.unit import serve_command
from zodex_gateway.web.server import Listeners, listen
from zodex_gateway.workers.dispatcher import Dispatcher, ZmqDispatcher
from zodex_gateway.workers.runtime import Runtime
from zodex_gateway.workers.runtime_dirs import hold_lock, write_owner_file
from zodex_gateway.workers.supervisor import Supervisor
from zodex_gateway.workers.template_launcher import template_switched_on
from zodex_protocol.envelope import new_key
from zodex_protocol.layout import RuntimeLayout
from zodex_protocol.limits import Limits
from zodex_system import log_lines
from zodex_system.secret_files import create_secret_file

log = logging.getLogger("zodex.sprite")

WORKER_CHECK = "import zodex_worker.main"
WORKER_CHECK_TIMEOUT_S = 60.0


class ServeRefused(Exception):
    """The service cannot start; one line saying why and how to fix it."""


@dataclass
class Prepared:
    service: pwd.struct_passwd
    agent: AgentAccount
    key: str
    sock: socket.socket
    tls: ssl.SSLContext | None
    layout: RuntimeLayout
    signing_key: bytes
    helper_config: HelperConfig
    runtime_id: str


def main(settings: SpriteSettings) -> int:
    try:
        prepared = prepare(settings)
    except ServeRefused as exc:
        print(f"zodex sprite serve: {exc}", file=sys.stderr)
        return 1
    parent_end, helper_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    helper_pid = os.fork()
    if helper_pid == 0:
        # The root helper: nothing of the network, and no use of the key. It is forked
        # after the key was checked, so its memory may still hold a copy: readable by root
        # only, who can read the key file anyway.
        parent_end.close()
        prepared.sock.close()
        prepared.key = ""
        Helper(helper_end, prepared.helper_config).run()
    helper_end.close()
    try:
        drop_privileges(prepared.service, prepared.agent.gid)
        _setup_logging(settings, prepared.key)
        return _serve(settings, prepared, parent_end)
    finally:
        parent_end.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(helper_pid, 0)
        with contextlib.suppress(OSError):
            settings.status_file.unlink()


# ---- as root, before anything is served ---------------------------------------------------


def service_and_agent(settings: SpriteSettings, how: str = "") -> tuple[pwd.struct_passwd, AgentAccount]:
    """The two accounts, checked, as root (Sprite's service and a fleet host alike);
    ``how`` says how to start it as root."""
    if os.geteuid() != 0:
        raise ServeRefused(
            f"must start as root: it starts the agent's workers as {settings.agent_user} and drops "
            f"to {settings.service_user} itself{how}"
        )
    service = _user(settings.service_user, "service")
    agent_entry = _user(settings.agent_user, "agent")
    agent = AgentAccount(
        agent_entry.pw_name, agent_entry.pw_uid, agent_entry.pw_gid, Path(agent_entry.pw_dir)
    )
    _check_accounts(settings, service, agent)
    return service, agent


def prepare(settings: SpriteSettings) -> Prepared:
    service, agent = service_and_agent(settings, " (run it with sudo, or through the systemd unit)")
    _check_own_python(settings, service, agent)
    try:
        key = read_key(settings.key_file, owner_uid=service.pw_uid)
    except KeyRefused as exc:
        raise ServeRefused(str(exc)) from None
    python = worker_python(settings)
    _check_worker(python, agent)
    _own_dir(settings.state_dir, service, 0o700)
    _own_dir(settings.log_file.parent, service, 0o700)
    layout, signing_key = make_runtime_dir(settings, service, agent)
    runtime_id = secrets.token_hex(6)  # names this run in every command's ZODEX_RUNTIME_ID
    tls = _tls_context(settings)
    try:
        sock = listen(settings.address, settings.port)
    except OSError as exc:
        raise ServeRefused(f"cannot listen on {settings.address}:{settings.port}: {exc.strerror}") from None
    config = HelperConfig(
        agent=agent,
        worker_argv=[python, "-I", "-m", "zodex_worker.main"],
        template_argv=[python, "-I", "-m", "zodex_worker.template"] if template_switched_on() else None,
        runtime_dir=layout.root,
        spill_dir=agent_state_dir(agent) / "spill",
        shell=COMMAND_SHELL,
        env=agent_environment(agent.name, agent.home, runtime_id),
    )
    return Prepared(service, agent, key, sock, tls, layout, signing_key, config, runtime_id)


def _user(name: str, what: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise ServeRefused(f"the {what} account {name} does not exist: run zodex sprite setup") from None


def _check_accounts(settings: SpriteSettings, service: pwd.struct_passwd, agent: AgentAccount) -> None:
    if 0 in (service.pw_uid, agent.uid):
        raise ServeRefused("neither the service account nor the agent account may be root (uid 0)")
    if service.pw_uid == agent.uid:
        raise ServeRefused(f"{service.pw_name} and {agent.name} are the same account (uid {agent.uid})")
    shared = {service.pw_gid}
    with contextlib.suppress(KeyError):
        shared.add(grp.getgrnam(settings.group).gr_gid)
    member_of = {g.gr_gid for g in grp.getgrall() if agent.name in g.gr_mem} | {agent.gid}
    if member_of & shared:
        raise ServeRefused(
            f"the agent account {agent.name} is in the service's group ({settings.group}), so it could "
            f"read the config: remove it (gpasswd -d {agent.name} {settings.group})"
        )


def _check_own_python(settings: SpriteSettings, service: pwd.struct_passwd, agent: AgentAccount) -> None:
    """After the drop, the service still imports (lazily, on its first calls): it must be
    able to read this Python's modules and Zodex's, or it would fail on the first call."""
    blocked = unreadable_import_root(service.pw_uid, {service.pw_gid, agent.gid})
    if blocked is None:
        return
    root, where, mode = blocked
    run = serve_command(settings)
    installed = "" if settings.installed_zodex.exists() else " once zodex sprite setup has installed it"
    raise ServeRefused(
        f"the service account {service.pw_name} could not read {root} ({where} is {mode:04o}), which this "
        f"zodex imports from, once it drops root: run {run}{installed}"
    )


def worker_python(settings: SpriteSettings) -> str:
    """The Python the agent runs workers with: the one ``zodex sprite setup`` installed under
    ``sprite.install-dir``, or else this one."""
    installed = settings.install_dir / "bin" / "python3"
    return str(installed) if installed.exists() else sys.executable


def _check_worker(python: str, agent: AgentAccount) -> None:
    env = agent_environment(agent.name, agent.home, "check")
    try:
        done = subprocess.run(
            [python, "-I", "-c", WORKER_CHECK],
            env=env,
            cwd="/",
            user=agent.uid,
            group=agent.gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=WORKER_CHECK_TIMEOUT_S,
            check=False,
        )
        problem = None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["failed"])[-1]
    except (OSError, subprocess.TimeoutExpired) as exc:
        problem = str(exc)
    if problem is not None:
        raise ServeRefused(
            f"the agent account {agent.name} cannot run the worker ({python} -c '{WORKER_CHECK}': "
            f"{problem}); run zodex sprite setup to install it where the agent can run it"
        )


def agent_state_dir(agent: AgentAccount) -> Path:
    """The agent's own Zodex directory: its spill files live there, and it may read them."""
    return agent.home / ".local" / "state" / "zodex"


def _own_dir(path: Path, service: pwd.struct_passwd, mode: int) -> None:
    """``path`` exists as the service account's own directory; made if missing."""
    if not path.exists():
        path.mkdir(mode=mode, parents=True)
        os.chown(path, service.pw_uid, service.pw_gid)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != service.pw_uid:
        raise ServeRefused(f"{path} must be a directory owned by {service.pw_name}: run zodex sprite setup")


def make_runtime_dir(
    settings: SpriteSettings, service: pwd.struct_passwd, agent: AgentAccount
) -> tuple[RuntimeLayout, bytes]:
    """A fresh runtime directory, ``<runtime-dir>/runtime``: the service's, and the agent's
    group may enter it, read the signing key and wait on the owner's lock; only ``w/`` (the
    workers' sockets and registry) is the agent's to write."""
    base = settings.runtime_dir
    base.mkdir(mode=0o755, parents=True, exist_ok=True)
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid not in (0, service.pw_uid) or info.st_mode & 0o022:
        raise ServeRefused(
            f"{base} must be a directory owned by root or {service.pw_name} that no one else may write"
        )
    layout = RuntimeLayout(base / "runtime")
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(layout.root).st_mode):
            shutil.rmtree(layout.root)  # a previous run's; its workers are gone with their owner
        else:
            os.unlink(layout.root)
    os.mkdir(layout.root, 0o700)
    os.mkdir(layout.workers_dir, 0o700)
    signing_key = new_key()
    create_secret_file(layout.key_file, signing_key)
    fd = os.open(layout.runtime_lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    for path, mode in (
        (layout.key_file, 0o640),
        (layout.runtime_lock, 0o640),
        (layout.workers_dir, 0o770),
        (layout.root, 0o750),
    ):
        os.chown(path, service.pw_uid, agent.gid, follow_symlinks=False)
        os.chmod(path, mode)
    return layout, signing_key


def _tls_context(settings: SpriteSettings) -> ssl.SSLContext | None:
    """Loaded as root: the certificate's key may be readable by root only."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ServeRefused(f"cannot load the TLS certificate {settings.tls_cert}: {exc}") from None
    return context


def drop_privileges(service: pwd.struct_passwd, agent_gid: int) -> None:
    """Become the service account for good. Its groups: its own, and the agent's own
    (user-private) group, to reach the workers' sockets; never the other way round."""
    os.setgroups(sorted({service.pw_gid, agent_gid}))
    os.setresgid(service.pw_gid, service.pw_gid, service.pw_gid)
    os.setresuid(service.pw_uid, service.pw_uid, service.pw_uid)
    try:
        os.setuid(0)
    except PermissionError:
        pass
    else:  # pragma: no cover - the kernel refuses; never serve if it did not
        raise SystemExit("zodex sprite serve: could not drop root privileges")
    os.chdir("/")


# ---- as the service account ---------------------------------------------------------------


def _setup_logging(settings: SpriteSettings, key: str) -> None:
    SECRETS.add(key)
    SECRETS.watch_file(settings.key_file)  # a rotated key never reaches the log either
    log_to(settings, settings.log_file, "%(asctime)s %(name)s %(levelname)s %(message)s", SECRETS.redact)
    logging.getLogger("mcp").setLevel(logging.WARNING)


def log_to(settings: SpriteSettings, path: Path, fmt: str, redact: Callable[[str], str] | None) -> None:
    """Info and above to ``path`` and to stderr, through the one log formatter (Sprite's
    service, a fleet host). The file is rotated at ``log.max-size``, ``log.keep`` kept."""
    rotating = logging.handlers.RotatingFileHandler(
        path, maxBytes=settings.log_max_bytes, backupCount=settings.log_keep
    )
    log_lines.use_for_root([rotating, logging.StreamHandler()], fmt, logging.INFO, redact)


def owning_runtime(
    runtime_id: str, layout: RuntimeLayout, signing_key: bytes, agent: AgentAccount, limits: Limits
) -> Runtime:
    """The runtime made in ``layout`` (:func:`make_runtime_dir`), held as its owner (Sprite's
    service, a fleet host): the agent's workers join it."""
    runtime = Runtime(
        runtime_id=runtime_id,
        layout=layout,
        key=signing_key,
        state_dir=agent_state_dir(agent),
        limits=limits,
        shell=COMMAND_SHELL,
        owner=True,
        _lock_fd=hold_lock(layout),
    )
    write_owner_file(layout)
    return runtime


def keyed_mcp(
    dispatcher: Dispatcher,
    mode: Mode,
    keys: KeySource,
    *,
    allowed_hosts: tuple[str, ...],
    workspace: str | None,
    max_body: int,
    limits: Limits | None = None,
    session_ids: SessionIds | None = None,
) -> SpriteFront:
    """MCP over HTTP for one workspace, behind Sprite's front (the key): Sprite's service,
    and each host of a fleet gateway."""
    tools = ToolDispatcher(dispatcher, limits=limits, mode=mode)
    mcp = McpHttpApp.serving(tools, start_directory=workspace, max_body=max_body, session_ids=session_ids)
    return SpriteFront(mcp, keys, allowed_hosts=allowed_hosts, version=zodex_version())


def _serve(settings: SpriteSettings, prepared: Prepared, helper_sock: socket.socket) -> int:
    runtime = owning_runtime(
        prepared.runtime_id, prepared.layout, prepared.signing_key, prepared.agent, settings.limits
    )
    keys = KeySource(settings.key_file, prepared.key, prepared.service.pw_uid)

    async def serve_all() -> None:
        launcher = HelperLauncher(helper_sock, stop_on_helper_loss)
        try:
            await serve_until_stopped(runtime, _transport(settings, prepared, keys, launcher), launcher)
        finally:
            launcher.close()

    log.info(
        "serving %s on %s:%d as %s; commands run as %s",
        settings.base_url(),
        settings.address,
        prepared.sock.getsockname()[1],
        prepared.service.pw_name,
        prepared.agent.name,
    )
    asyncio.run(serve_all())
    log.info("stopped")
    return 0


def _transport(
    settings: SpriteSettings, prepared: Prepared, keys: KeySource, launcher: HelperLauncher
) -> Serve:
    async def serve(supervisor: Supervisor, stop: StopSignal) -> None:
        stop.add_cleanup(launcher.stop)  # after the workers: every process of the agent goes
        limits = settings.listener_limits()
        listeners = Listeners(limits, lifespan="on", graceful_s=2)
        front = keyed_mcp(
            ZmqDispatcher(supervisor),
            Mode.SPRITE,
            keys,
            allowed_hosts=settings.allowed_hosts,
            workspace=str(settings.workspace),
            max_body=limits.max_body,
            limits=settings.limits,
        )
        listeners.add(front, prepared.sock, prepared.tls)
        stop.add_graceful_exit(listeners.stop)
        write_status(settings, prepared)
        await listeners.serve()

    return serve


def write_status(settings: SpriteSettings, prepared: Prepared) -> None:
    """What ``zodex sprite status`` reads (docs/sprite.md#the-service)."""
    status = {
        "pid": os.getpid(),
        "port": prepared.sock.getsockname()[1],
        "version": zodex_version(),
        "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "agent_user": prepared.agent.name,
        "public_url": settings.base_url(),
    }
    path = settings.status_file
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as out:
        json.dump(status, out)
    os.replace(temp, path)
