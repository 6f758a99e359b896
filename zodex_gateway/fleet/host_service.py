"""``zodex host serve``: a fleet host in the foreground (docs/fleet.md#hosts).

Sprite's service without its HTTP listener: it starts as root, checks the accounts, the
worker and its keys, makes its runtime directory, forks Sprite's root helper, drops to the
service account for good and serves gateways over ``tcp://`` with CURVE until SIGTERM or
SIGINT. Stopping stops the workers, then has the helper kill every process of the agent
account. Its sessions do not depend on any gateway being connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import secrets
import socket
import sys
from dataclasses import dataclass

from zodex_gateway.config.units import ConfigError
from zodex_gateway.fleet import keys
from zodex_gateway.fleet.host_server import HostServer, IncarnationCheck
from zodex_gateway.fleet.incarnations import start_incarnation
from zodex_gateway.fleet.settings import HostSettings
from zodex_gateway.serve.running import Serve, StopSignal, serve_until_stopped
from zodex_gateway.sprite.agent_processes import AgentAccount
from zodex_gateway.sprite.environment import COMMAND_SHELL, agent_environment
from zodex_gateway.sprite.helper import Helper, HelperConfig
from zodex_gateway.sprite.launcher import HelperLauncher, stop_on_helper_loss
from zodex_gateway.sprite.reach import unreadable_import_root
from zodex_gateway.sprite.service import (
    ServeRefused,
    _check_worker,
    _own_dir,
    agent_state_dir,
    drop_privileges,
    log_to,
    make_runtime_dir,
    owning_runtime,
    service_and_agent,
    worker_python,
)
from zodex_gateway.workers.dispatcher import ZmqDispatcher
from zodex_gateway.workers.supervisor import Supervisor
from zodex_gateway.workers.template_launcher import template_switched_on
from zodex_protocol.layout import RuntimeLayout
from zodex_protocol.limits import max_message_bytes
from zodex_system import descriptor_limit

log = logging.getLogger("zodex.host")


@dataclass
class PreparedHost:
    service: pwd.struct_passwd
    agent: AgentAccount
    layout: RuntimeLayout
    runtime_signing_key: bytes  # the workers' (ipc), never the gateways'
    helper_config: HelperConfig
    runtime_id: str
    incarnation: str
    earlier: set[str]
    secret_key: bytes
    signing_key: bytes
    gateway_keys: set[bytes]


def main(settings: HostSettings) -> int:
    try:
        prepared = prepare(settings)
    except (ServeRefused, ConfigError) as exc:
        print(f"zodex host serve: {exc}", file=sys.stderr)
        return 1
    parent_end, helper_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    helper_pid = os.fork()
    if helper_pid == 0:  # the root helper: no network socket, no key of the gateways
        parent_end.close()
        prepared.secret_key = prepared.signing_key = b""
        Helper(helper_end, prepared.helper_config).run()
    helper_end.close()
    try:
        drop_privileges(prepared.service, prepared.agent.gid)
        _setup_logging(settings)
        # Every connection, authenticated or not, is a descriptor: the soft limit (1024
        # under systemd) up to the hard one. The helper, forked before, keeps the usual
        # limit for the workers and their commands.
        descriptor_limit.raise_to_hard_limit()
        return _serve(settings, prepared, parent_end)
    finally:
        parent_end.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(helper_pid, 0)


def prepare(settings: HostSettings) -> PreparedHost:
    sprite = settings.sprite
    service, agent = service_and_agent(sprite)
    blocked = unreadable_import_root(service.pw_uid, {service.pw_gid, agent.gid})
    if blocked is not None:
        root, where, mode = blocked
        raise ServeRefused(
            f"the service account {service.pw_name} could not read {root} ({where} is {mode:04o}), which "
            f"this zodex imports from, once it drops root: install Zodex where every account can read it "
            f"(zodex sprite setup installs it in {sprite.install_dir})"
        )
    owners = {0, service.pw_uid}
    secret_key = keys.read_z85_secret(settings.secret_key, owners)
    signing_key = keys.signing_key(keys.read_z85_secret(settings.signing_key, owners))
    gateway_keys = keys.gateway_keys(settings.gateway_keys)
    python = worker_python(sprite)
    _check_worker(python, agent)
    _own_dir(sprite.state_dir, service, 0o700)
    _own_dir(settings.log_file.parent, service, 0o700)
    incarnation, earlier = start_incarnation(settings.incarnations_file)
    layout, runtime_signing_key = make_runtime_dir(sprite, service, agent)
    runtime_id = secrets.token_hex(6)
    config = HelperConfig(
        agent=agent,
        # The helper builds the rest of each worker's command line; this part is fixed.
        worker_argv=[python, "-I", "-m", "zodex_worker.main"],
        worker_args=["--host-incarnation", incarnation],
        template_argv=[python, "-I", "-m", "zodex_worker.template"] if template_switched_on() else None,
        runtime_dir=layout.root,
        spill_dir=agent_state_dir(agent) / "spill",
        shell=COMMAND_SHELL,
        env=agent_environment(agent.name, agent.home, runtime_id),
    )
    return PreparedHost(
        service, agent, layout, runtime_signing_key, config, runtime_id, incarnation, earlier,
        secret_key, signing_key, gateway_keys,
    )  # fmt: skip


def _setup_logging(settings: HostSettings) -> None:
    # The host's name is a-z, 0-9 and -: nothing in it is a format directive.
    log_to(
        settings.sprite,
        settings.log_file,
        f"%(asctime)s host {settings.name} %(name)s %(levelname)s %(message)s",
        None,
    )


def _serve(settings: HostSettings, prepared: PreparedHost, helper_sock: socket.socket) -> int:
    runtime = owning_runtime(
        prepared.runtime_id,
        prepared.layout,
        prepared.runtime_signing_key,
        prepared.agent,
        settings.sprite.limits,
    )

    async def serve_all() -> None:
        launcher = HelperLauncher(helper_sock, stop_on_helper_loss)
        try:
            await serve_until_stopped(runtime, _transport(settings, prepared, launcher), launcher)
        finally:
            launcher.close()

    asyncio.run(serve_all())
    log.info("stopped")
    return 0


def _transport(settings: HostSettings, prepared: PreparedHost, launcher: HelperLauncher) -> Serve:
    async def serve(supervisor: Supervisor, stop: StopSignal) -> None:
        stop.add_cleanup(launcher.stop)  # after the workers: every process of the agent goes
        dispatcher = IncarnationCheck(
            ZmqDispatcher(supervisor),
            settings.name,
            prepared.incarnation,
            prepared.earlier,
            supervisor.runtime.limits,
        )
        server = HostServer(
            dispatcher,
            endpoint=settings.endpoint,
            secret_key=prepared.secret_key,
            signing_key=prepared.signing_key,
            gateway_keys=prepared.gateway_keys,
            max_message=max_message_bytes(supervisor.runtime.limits),
            max_pending=settings.max_pending_connections,
        )
        stop.add_graceful_exit(server.stop)
        log.info(
            "host %s serving on %s (incarnation %s) as %s; commands run as %s",
            settings.name, server.bound, prepared.incarnation, prepared.service.pw_name, prepared.agent.name,
        )  # fmt: skip
        await server.serve()

    return serve
