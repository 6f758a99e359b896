"""Reading deploy/: the Kubernetes manifests by kind and name, and the image definition."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
CONTAINERFILE = DEPLOY / "Containerfile"
HAPROXY_CFG = DEPLOY / "haproxy" / "haproxy.cfg"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"

# The Kubernetes version the manifests are checked against (kubernetes-validate's schemas).
KUBERNETES_VERSION = "1.30"

# The image's accounts (deploy/Containerfile) as the manifests name them by number.
SERVICE_UID = 10001
AGENT_UID = 10002
GATEWAY_UID = 10003


@dataclass(frozen=True)
class Manifest:
    path: Path
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc["kind"])

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])


def manifests() -> list[Manifest]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append(Manifest(path, doc))
    return found


def one(kind: str, name: str) -> dict[str, Any]:
    matches = [m.doc for m in manifests() if m.kind == kind and m.name == name]
    assert len(matches) == 1, f"expected one {kind}/{name} in deploy/k8s, found {len(matches)}"
    return matches[0]


def container(pod_spec: dict[str, Any], name: str, *, init: bool = False) -> dict[str, Any]:
    listed = pod_spec["initContainers" if init else "containers"]
    matches = [c for c in listed if c["name"] == name]
    assert len(matches) == 1, f"no container {name}"
    return matches[0]


def volume(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    matches = [v for v in pod_spec["volumes"] if v["name"] == name]
    assert len(matches) == 1, f"no volume {name}"
    return matches[0]


def mount_of(c: dict[str, Any], path: str) -> dict[str, Any]:
    matches = [m for m in c.get("volumeMounts", []) if m["mountPath"] == path]
    assert len(matches) == 1, f"container {c['name']} mounts nothing at {path}"
    return matches[0]


def port_named(c: dict[str, Any], name: str) -> int:
    matches = [p["containerPort"] for p in c.get("ports", []) if p["name"] == name]
    assert len(matches) == 1, f"container {c['name']} has no port {name}"
    return int(matches[0])


def host_template() -> str:
    return str(one("ConfigMap", "zodex-host-config")["data"]["host.toml.in"])


def gateway_toml() -> dict[str, Any]:
    return tomllib.loads(one("ConfigMap", "zodex-gateway-config")["data"]["gateway.toml"])
