"""The host pod's init container, run for real: its script from deploy/k8s/hosts.yaml, as root
holding only CAP_CHOWN (its securityContext), over directories standing in for its mounts,
with keys made by ``zodex host keygen``. What it leaves must be what ``zodex host serve``
accepts (read with the host's own config and key readers), and one pod's files must hold
nothing of another host's keys.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.manifests import AGENT_UID, SERVICE_UID, container, host_template, one
from zodex_gateway.fleet.keys import gateway_keys, keygen, read_public_key, read_z85_secret
from zodex_gateway.fleet.settings import load_host_settings

MOUNTS = (
    "/config-template",
    "/all-host-keys",
    "/gateway-public-keys",
    "/etc/zodex",
    "/workspace",
    "/var/lib/zodex",
)


@pytest.fixture
def pod_root() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("the init container runs as root and sets owners: needs root")
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is needed to run the script with only CAP_CHOWN")
    root = Path(tempfile.mkdtemp(prefix="zodex-prepare-"))
    try:
        yield root
    finally:
        shutil.rmtree(root)


def stand_in_mounts(root: Path) -> None:
    for mount in MOUNTS:
        (root / mount.lstrip("/")).mkdir(parents=True)
    (root / "config-template" / "host.toml.in").write_text(host_template())
    keys = root / "all-host-keys"
    for host in ("zodex-host-0", "zodex-host-1"):
        keygen(keys, host)
        keygen(keys, host, "signing")
    keygen(root / "gateway-public-keys", "gateway")
    (root / "gateway-public-keys" / "gateway.key").unlink()  # only the public half goes to hosts
    for path in [*keys.iterdir(), *(root / "gateway-public-keys").iterdir()]:
        path.chmod(0o400)  # the Secret volumes' defaultMode
    (root / "etc" / "zodex").chmod(0o777)  # an emptyDir as the kubelet makes it
    (root / "workspace").chmod(0o755)  # new volumes: root's
    (root / "var" / "lib" / "zodex").chmod(0o755)


def run_prepare(root: Path, pod: str) -> subprocess.CompletedProcess[str]:
    spec = one("StatefulSet", "zodex-host")["spec"]["template"]["spec"]
    prepare = container(spec, "prepare", init=True)
    assert prepare["command"][0] == "/bin/sh"
    script = prepare["args"][0]
    for mount in MOUNTS:
        script = script.replace(mount, f"{root}{mount}")
    capabilities = prepare["securityContext"]["capabilities"]
    assert capabilities["drop"] == ["ALL"]
    bounding = ",".join(["-all"] + [f"+{c.lower()}" for c in capabilities["add"]])
    # As root, the bounding set is what an execve leaves in the permitted set: the script
    # runs with exactly the container's capabilities.
    return subprocess.run(
        [
            "setpriv",
            f"--bounding-set={bounding}",
            "--inh-caps=-all",
            "--no-new-privs",
            *prepare["command"],
            script,
        ],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "POD_NAME": pod},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def mode_owner(path: Path) -> tuple[int, int, int]:
    info = os.stat(path)
    return stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid


def test_a_pod_gets_its_own_config_and_keys_as_the_host_reads_them(pod_root: Path) -> None:
    stand_in_mounts(pod_root)
    done = run_prepare(pod_root, "zodex-host-1")
    assert done.returncode == 0, done.stderr
    etc = pod_root / "etc" / "zodex"
    assert mode_owner(etc / "host.toml") == (0o640, 0, SERVICE_UID)
    assert mode_owner(etc / "keys") == (0o700, 0, 0)
    assert mode_owner(etc / "keys" / "host.key") == (0o400, 0, 0)
    assert mode_owner(etc / "keys" / "signing.key") == (0o400, 0, 0)
    assert mode_owner(pod_root / "workspace") == (0o750, AGENT_UID, AGENT_UID)
    assert mode_owner(pod_root / "var" / "lib" / "zodex") == (0o700, SERVICE_UID, SERVICE_UID)

    # The rendered config, with this pod's name, is one the host loads; its paths are the
    # files just written once the stand-in prefix is put back.
    text = (etc / "host.toml").read_text().replace("/etc/zodex", str(etc))
    rendered = pod_root / "host.toml"
    rendered.write_text(text)
    settings = load_host_settings(rendered)
    assert settings.name == "zodex-host-1"
    assert settings.endpoint == "tcp://0.0.0.0:7700"
    keys = pod_root / "all-host-keys"
    assert read_z85_secret(settings.secret_key, {0, SERVICE_UID}) == read_z85_secret(
        keys / "zodex-host-1.key"
    )
    assert read_z85_secret(settings.signing_key, {0, SERVICE_UID}) == read_z85_secret(
        keys / "zodex-host-1.signing"
    )
    assert gateway_keys(settings.gateway_keys) == {
        read_public_key(pod_root / "gateway-public-keys" / "gateway.pub")
    }

    # Nothing of the other host reached this pod.
    others = {(keys / f"zodex-host-0.{kind}").read_text().strip() for kind in ("key", "signing")}
    for path in etc.rglob("*"):
        if path.is_file():
            assert not others & set(path.read_text().split()), path


def test_a_restarted_pod_prepares_again_and_keeps_the_workspace(pod_root: Path) -> None:
    stand_in_mounts(pod_root)
    assert run_prepare(pod_root, "zodex-host-0").returncode == 0
    work = pod_root / "workspace" / "notes.txt"
    work.write_text("kept")
    os.chown(work, AGENT_UID, AGENT_UID)
    done = run_prepare(pod_root, "zodex-host-0")  # init containers run again; emptyDirs stay
    assert done.returncode == 0, done.stderr
    assert mode_owner(pod_root / "workspace") == (0o750, AGENT_UID, AGENT_UID)
    assert mode_owner(work)[1:] == (AGENT_UID, AGENT_UID) and work.read_text() == "kept"
    assert 'name = "zodex-host-0"' in (pod_root / "etc" / "zodex" / "host.toml").read_text()


def test_a_pod_without_keys_of_its_own_does_not_start(pod_root: Path) -> None:
    stand_in_mounts(pod_root)
    done = run_prepare(pod_root, "zodex-host-2")  # scaled up before its keys were added
    assert done.returncode != 0
    assert "zodex-host-2.key" in done.stderr
    assert not (pod_root / "etc" / "zodex" / "keys" / "host.key").exists()
