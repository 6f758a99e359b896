"""deploy/k8s/ checked offline: every manifest against Kubernetes' schemas, and the parts
that must agree with each other, with the image and with docs/deploy.md#kubernetes.

No cluster runs here; what these checks cannot show is said in docs/deploy.md#what-was-run.
"""

from __future__ import annotations

import copy
import re
import tomllib
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.manifests import (
    AGENT_UID,
    DEPLOY_DOC,
    GATEWAY_UID,
    K8S,
    KUBERNETES_VERSION,
    SERVICE_UID,
    container,
    gateway_toml,
    host_template,
    manifests,
    mount_of,
    one,
    port_named,
    volume,
)

HOST_CAPABILITIES = {"SETUID", "SETGID", "CHOWN", "FOWNER", "KILL", "DAC_OVERRIDE"}


def validate(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("manifest", manifests(), ids=lambda m: f"{m.path.name}:{m.kind}/{m.name}")
def test_every_manifest_validates_against_the_pinned_kubernetes(manifest: Any) -> None:
    # SchemaNotFoundError (an unknown kind or apiVersion) is an error here, not a warning.
    validate(manifest.doc)


def test_the_validator_refuses_what_kubernetes_would() -> None:
    """A control: the check above can fail, on an unknown field and on a wrong type."""
    doc = copy.deepcopy(one("Deployment", "zodex-gateway"))
    doc["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(doc)
    doc = copy.deepcopy(one("StatefulSet", "zodex-host"))
    doc["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(doc)


def test_the_layout_is_the_documented_one() -> None:
    kinds = {(m.kind, m.name) for m in manifests()}
    assert kinds == {
        ("Namespace", "zodex"),
        ("ConfigMap", "zodex-host-config"),
        ("Service", "zodex-hosts"),
        ("StatefulSet", "zodex-host"),
        ("ConfigMap", "zodex-gateway-config"),
        ("Deployment", "zodex-gateway"),
        ("Service", "zodex-gateway"),
        ("PodDisruptionBudget", "zodex-gateway"),
        ("NetworkPolicy", "zodex-host-ingress"),
    }
    for m in manifests():
        if m.kind != "Namespace":
            assert m.doc["metadata"]["namespace"] == "zodex", f"{m.kind}/{m.name}"


def test_no_secret_is_in_the_manifests() -> None:
    """Keys are made by zodex host keygen and given to the cluster by the operator."""
    assert all(m.kind != "Secret" for m in manifests())
    text = "\n".join(p.read_text() for p in K8S.glob("*.yaml"))
    # 40 z85 characters (a CURVE or signing key) or 43 URL-safe ones (an MCP key).
    assert not re.search(r"(?<![\w/.-])[0-9A-Za-z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}(?![\w/.-])", text)
    assert not re.search(r"(?<![\w-])[A-Za-z0-9_-]{43}(?![\w-])", text)


def secret_names() -> set[str]:
    names = set()
    for m in manifests():
        spec = m.doc.get("spec", {}).get("template", {}).get("spec", {})
        names |= {v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
    return names


def test_every_secret_mounted_is_one_the_docs_say_how_to_make() -> None:
    assert secret_names() == {"zodex-host-keys", "zodex-gateway-public-keys", "zodex-gateway-keys"}
    doc = DEPLOY_DOC.read_text()
    for name in secret_names():
        assert f"kubectl -n zodex create secret generic {name}" in doc, name


# ---- gateways ---------------------------------------------------------------------------


def test_gateways_are_replicas_behind_a_service_on_their_http_port() -> None:
    deployment = one("Deployment", "zodex-gateway")
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    gateway = container(pod["spec"], "gateway")
    assert gateway["image"] == "zodex-gateway:0.1.0"
    assert gateway["args"] == ["--config", "/etc/zodex/gateway.toml"]
    http = port_named(gateway, "http")
    assert http == gateway_toml()["gateway"]["port"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert gateway[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    service = one("Service", "zodex-gateway")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    budget = one("PodDisruptionBudget", "zodex-gateway")
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert 1 <= budget["spec"]["minAvailable"] < deployment["spec"]["replicas"]


def test_gateways_run_unprivileged_and_read_their_keys_through_their_group() -> None:
    spec = one("Deployment", "zodex-gateway")["spec"]["template"]["spec"]
    pod_security = spec["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    assert pod_security["runAsUser"] == pod_security["runAsGroup"] == pod_security["fsGroup"] == GATEWAY_UID
    assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    gateway = container(spec, "gateway")
    assert gateway["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    keys = volume(spec, "keys")["secret"]
    # root:<fsGroup> 0440: the gateway reads through its group; others nothing (fleet.md's rule).
    assert keys["defaultMode"] == 0o440
    assert mount_of(gateway, "/etc/zodex/keys")["readOnly"] is True


def test_gateway_config_names_every_host_of_the_statefulset_by_its_stable_name() -> None:
    config = gateway_toml()
    statefulset = one("StatefulSet", "zodex-host")
    headless = one("Service", "zodex-hosts")
    host_port = port_named(container(statefulset["spec"]["template"]["spec"], "host"), "zmq")
    pods = [f"zodex-host-{i}" for i in range(statefulset["spec"]["replicas"])]
    assert [h["name"] for h in config["hosts"]] == pods
    for host in config["hosts"]:
        name = host["name"]
        assert host["endpoint"] == f"tcp://{name}.zodex-hosts.zodex.svc.cluster.local:{host_port}"
        assert host["public-key"] == f"/etc/zodex/keys/{name}.pub"
        assert host["signing-key"] == f"/etc/zodex/keys/{name}.signing"
        assert host["mcp-key"] == f"/etc/zodex/keys/{name}.mcp"
        assert host["workspace"] == "/workspace"
    assert config["gateway"]["secret-key"].startswith("/etc/zodex/keys/")
    assert [p["port"] for p in headless["spec"]["ports"]] == [host_port]


# ---- hosts ------------------------------------------------------------------------------


def test_hosts_are_a_statefulset_with_a_workspace_volume_and_stable_names() -> None:
    statefulset = one("StatefulSet", "zodex-host")
    headless = one("Service", "zodex-hosts")
    assert headless["spec"]["clusterIP"] == "None"
    assert statefulset["spec"]["serviceName"] == "zodex-hosts"
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert headless["spec"]["selector"].items() <= labels.items()
    spec = statefulset["spec"]["template"]["spec"]
    host = container(spec, "host")
    assert host["image"] == "zodex-host:0.1.0"
    assert host["args"] == ["--config", "/etc/zodex/host.toml"]
    claims = [t["metadata"]["name"] for t in statefulset["spec"]["volumeClaimTemplates"]]
    assert claims == ["workspace", "state"]
    assert mount_of(host, "/workspace")["name"] == "workspace"
    assert mount_of(host, "/var/lib/zodex")["name"] == "state"
    zmq = port_named(host, "zmq")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert host[probe]["tcpSocket"] == {"port": "zmq"}, probe
    rendered = tomllib.loads(host_template())
    assert rendered["host"]["endpoint"] == f"tcp://0.0.0.0:{zmq}"
    assert rendered["sprite"]["workspace"] == "/workspace"
    policy = one("NetworkPolicy", "zodex-host-ingress")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert [p["port"] for p in policy["spec"]["ingress"][0]["ports"]] == [zmq]


def test_hosts_start_as_root_with_only_the_capabilities_the_privilege_model_needs() -> None:
    spec = one("StatefulSet", "zodex-host")["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsUser"] == 0
    assert "fsGroup" not in spec["securityContext"]
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    host = container(spec, "host")["securityContext"]
    assert host["allowPrivilegeEscalation"] is False
    assert host["privileged"] is False
    assert host["capabilities"]["drop"] == ["ALL"]
    assert set(host["capabilities"]["add"]) == HOST_CAPABILITIES
    prepare = container(spec, "prepare", init=True)["securityContext"]
    assert prepare["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert prepare["readOnlyRootFilesystem"] is True
    doc = DEPLOY_DOC.read_text()
    for capability in HOST_CAPABILITIES:
        assert f"`{capability}`" in doc, f"docs/deploy.md does not say why a host keeps {capability}"


def test_a_host_sees_only_its_own_keys() -> None:
    spec = one("StatefulSet", "zodex-host")["spec"]["template"]["spec"]
    host = container(spec, "host")
    prepare = container(spec, "prepare", init=True)
    secret_volumes = {v["name"] for v in spec["volumes"] if "secret" in v}
    assert secret_volumes == {"all-host-keys", "gateway-public-keys"}
    assert not secret_volumes & {m["name"] for m in host["volumeMounts"]}
    assert secret_volumes <= {m["name"] for m in prepare["volumeMounts"]}
    for name in secret_volumes:
        assert volume(spec, name)["secret"]["defaultMode"] == 0o400
    etc = volume(spec, "etc-zodex")["emptyDir"]
    assert etc["medium"] == "Memory"
    assert mount_of(host, "/etc/zodex")["readOnly"] is True


def test_every_container_asks_for_resources() -> None:
    for m in manifests():
        spec = m.doc.get("spec", {}).get("template", {}).get("spec")
        if spec is None:
            continue
        for c in spec.get("initContainers", []) + spec["containers"]:
            assert {"cpu", "memory"} <= c["resources"]["requests"].keys(), f"{m.name}/{c['name']}"
            assert "memory" in c["resources"]["limits"], f"{m.name}/{c['name']}"


def test_the_account_ids_are_the_image_s() -> None:
    from tests.deploy.manifests import CONTAINERFILE

    text = CONTAINERFILE.read_text()
    for account, uid in (("zodex", SERVICE_UID), ("zodex-agent", AGENT_UID), ("zodex-gateway", GATEWAY_UID)):
        assert re.search(rf"useradd [^\n]*--uid {uid} [^\n]*\b{account}\b", text.replace("\\\n", " ")), (
            account
        )
    script = container(one("StatefulSet", "zodex-host")["spec"]["template"]["spec"], "prepare", init=True)
    assert f"chown {AGENT_UID}:{AGENT_UID} /workspace" in script["args"][0]
    assert f"chown 0:{SERVICE_UID} /etc/zodex/host.toml" in script["args"][0]


def test_gateway_toml_is_one_the_gateway_loads() -> None:
    from pathlib import Path

    from zodex_gateway.fleet.settings import parse_gateway_document

    settings = parse_gateway_document(gateway_toml(), Path("/etc/zodex/gateway.toml"))
    assert [h.name for h in settings.hosts] == ["zodex-host-0", "zodex-host-1"]
    assert settings.port == 8080 and settings.address == "0.0.0.0"
