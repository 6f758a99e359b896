"""deploy/Containerfile checked offline with dockerfile-parse: what each target runs, as
whom, on which port, from which base, and that nothing secret goes into the image.

No image is built here; docs/deploy.md#what-was-run says what that leaves unchecked.
"""

from __future__ import annotations

import io
import json
import re
import tomllib
from dataclasses import dataclass, field

from dockerfile_parse import DockerfileParser

from tests.deploy.manifests import (
    CONTAINERFILE,
    GATEWAY_UID,
    ROOT,
    container,
    gateway_toml,
    host_template,
    one,
    port_named,
)


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def values(self, instruction: str) -> list[str]:
        return [v for i, v in self.instructions if i == instruction]

    def last(self, instruction: str) -> str:
        found = self.values(instruction)
        assert found, f"stage {self.name} has no {instruction}"
        return found[-1]


def stages() -> dict[str, Stage]:
    # dockerfile-parse looks for a file named Dockerfile; given the text, it parses that.
    parser = DockerfileParser(fileobj=io.BytesIO(CONTAINERFILE.read_bytes()))
    found: dict[str, Stage] = {}
    current: Stage | None = None
    for item in parser.structure:
        instruction, value = item["instruction"], item["value"]
        if instruction == "COMMENT":
            continue
        if instruction == "FROM":
            match = re.fullmatch(r"(\S+) AS (\S+)", value, re.IGNORECASE)
            assert match, f"every stage is named: FROM {value}"
            current = Stage(match.group(2), match.group(1))
            found[current.name] = current
            continue
        assert current is not None, f"{instruction} before FROM"
        current.instructions.append((instruction, value))
    return found


def inherited(name: str, instruction: str) -> str:
    """The value a target ends with, looking through the stages it is built FROM."""
    all_stages = stages()
    stage = all_stages[name]
    while not stage.values(instruction):
        stage = all_stages[stage.base]
    return stage.last(instruction)


def test_two_targets_on_one_pinned_debian_python_slim_base() -> None:
    all_stages = stages()
    assert list(all_stages) == ["build", "base", "host", "gateway"]
    external = {s.base for s in all_stages.values() if s.base not in all_stages}
    assert len(external) == 1, f"build and run stages use one base image, not {external}"
    (base,) = external
    match = re.fullmatch(r"python:(\d+)\.(\d+)\.(\d+)-slim-bookworm", base)
    assert match, f"{base}: pin the Python release and the Debian suite, never a floating tag"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    minimum = tuple(int(n) for n in re.fullmatch(r">=(\d+)\.(\d+)", requires).groups())  # type: ignore[union-attr]
    assert (int(match.group(1)), int(match.group(2))) >= minimum


def test_the_host_starts_as_root_under_tini_and_serves_its_configured_port() -> None:
    host = stages()["host"]
    assert host.last("USER") == "root"
    assert json.loads(host.last("ENTRYPOINT")) == [
        "/usr/bin/tini",
        "--",
        "/opt/zodex/bin/zodex",
        "host",
        "serve",
    ]
    args = json.loads(host.last("CMD"))
    assert args == ["--config", "/etc/zodex/host.toml"]
    statefulset = one("StatefulSet", "zodex-host")["spec"]["template"]["spec"]
    assert container(statefulset, "host")["args"] == args
    port = tomllib.loads(host_template())["host"]["endpoint"].rsplit(":", 1)[1]
    assert host.values("EXPOSE") == [port]
    assert int(port) == port_named(container(statefulset, "host"), "zmq")


def test_the_gateway_runs_as_its_numeric_account_and_serves_its_configured_port() -> None:
    gateway = stages()["gateway"]
    # Numeric, so Kubernetes can tell runAsNonRoot is met without reading /etc/passwd.
    assert gateway.last("USER") == f"{GATEWAY_UID}:{GATEWAY_UID}"
    assert json.loads(gateway.last("ENTRYPOINT")) == [
        "/usr/bin/tini",
        "--",
        "/opt/zodex/bin/zodex",
        "gateway",
        "serve",
    ]
    args = json.loads(gateway.last("CMD"))
    deployment = one("Deployment", "zodex-gateway")["spec"]["template"]["spec"]
    assert container(deployment, "gateway")["args"] == args == ["--config", "/etc/zodex/gateway.toml"]
    assert gateway.values("EXPOSE") == [str(gateway_toml()["gateway"]["port"])]
    assert int(gateway.values("EXPOSE")[0]) == port_named(container(deployment, "gateway"), "http")


def test_the_entry_points_are_commands_zodex_has() -> None:
    from click.testing import CliRunner

    from zodex_gateway.cli import cli

    for target in ("host", "gateway"):
        entry = json.loads(inherited(target, "ENTRYPOINT"))
        argv = entry[entry.index("/opt/zodex/bin/zodex") + 1 :] + json.loads(inherited(target, "CMD"))[:1]
        done = CliRunner().invoke(cli, [*argv[:-1], "--help"])
        assert done.exit_code == 0, f"zodex {' '.join(argv[:-1])}: {done.output}"
        assert argv[-1] in done.output, f"zodex {' '.join(argv[:-1])} has no {argv[-1]}"


def test_zodex_is_installed_from_the_repository_s_own_packages() -> None:
    build = stages()["build"]
    copied = [v.split()[0] for v in build.values("COPY")]
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: not in the build context"
    packages = sorted(p.name for p in ROOT.glob("zodex_*") if (p / "__init__.py").is_file())
    assert sorted(c for c in copied if c.startswith("zodex_")) == packages
    install = " ".join(build.values("RUN"))
    assert "python -m venv /opt/zodex" in install
    assert "/opt/zodex/bin/pip install" in install
    base = stages()["base"]
    assert "--from=build /opt/zodex /opt/zodex" in base.values("COPY")


def test_the_accounts_and_the_workspace_are_made_as_documented() -> None:
    run = " ".join(stages()["base"].values("RUN")).replace("\\", " ")
    agent = re.search(r"useradd ([^&]*)\bzodex-agent\b", run)
    assert agent, "the agent account is made in the image"
    assert "--shell /bin/bash" in agent.group(1)
    # Its own group and no other: no sudo, never the service's group (docs/sprite.md#files-and-modes).
    assert "--groups" not in agent.group(1) and " -G " not in agent.group(1)
    assert "sudo" not in run
    assert "install -d -o zodex-agent -g zodex-agent -m 0750 /workspace" in run
    assert "--shell /usr/sbin/nologin zodex" in run
    assert "--shell /usr/sbin/nologin zodex-gateway" in run
    assert "apt-get install -y --no-install-recommends tini" in run


def test_nothing_secret_is_baked_into_the_image() -> None:
    all_stages = stages()
    for stage in all_stages.values():
        for instruction, value in stage.instructions:
            assert instruction != "ADD", "ADD may fetch URLs or unpack archives: COPY only"
            if instruction in ("ENV", "ARG"):
                assert not re.search(r"KEY|TOKEN|SECRET|PASSW", value, re.IGNORECASE), value
            if instruction == "COPY":
                assert not re.search(r"\.(key|pub|signing|mcp|pem)\b|/etc/zodex", value), value
            if instruction == "RUN":
                # Either would write a key into a layer every pull of the image hands out.
                assert "keygen" not in value and "sprite setup" not in value, value
                assert "rotate-key" not in value, value
