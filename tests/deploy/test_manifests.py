"""deploy/ checked offline: every Kubernetes manifest (each file, and each overlay as kustomize
renders it when kubectl is on PATH) against the Kubernetes JSON schemas shipped in
kubernetes-validate; the CRDs (ServiceMonitor, ScaledObject) structurally, the autoscaling
policy included; the Dockerfiles' user, health check and cache volume; the alert rules with
promtool when it is installed. Metric names are checked against a live server in
tests/server/test_deploy_metric_names.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "k8s"
K8S_VERSION = "1.30.0"
CRD_KINDS = {"ServiceMonitor", "ScaledObject"}


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _manifest_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def _rendered(overlay: str) -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(K8S / "overlays" / overlay)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _validate(doc: dict) -> None:
    if doc["kind"] in CRD_KINDS:
        _check_crd(doc)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("path", _manifest_files(), ids=lambda p: str(p.relative_to(K8S)))
def test_manifest_files_validate(path):
    for doc in _docs(path):
        if path.parent.name in ("cpu", "gpu") and doc["kind"] == "Deployment":
            continue  # a strategic-merge patch: partial by design, validated once rendered
        _validate(doc)


def test_schema_validation_catches_a_broken_manifest():
    doc = _docs(K8S / "base" / "replica-deployment.yaml")[0]
    doc["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = [1]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", ["cpu", "gpu"], ids=lambda o: f"overlay-{o}")  # not "gpu": a marker name
def test_overlays_render_and_validate(overlay):
    kustomization = yaml.safe_load((K8S / "overlays" / overlay / "kustomization.yaml").read_text())
    for ref in kustomization["resources"] + [p["path"] for p in kustomization.get("patches", [])]:
        assert (K8S / "overlays" / overlay / ref).exists(), ref
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not on PATH: overlays checked by file only (test_manifest_files_validate)")
    docs = _rendered(overlay)
    for doc in docs:
        _validate(doc)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds.count("Deployment") == 2 and "ScaledObject" in kinds and "ServiceMonitor" in kinds
    replica = _by_name(docs, "Deployment", "sglang-lite")
    container = replica["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"ghcr.io/example/sglang-lite:{'cuda' if overlay == 'gpu' else 'cpu'}"
    if overlay == "gpu":
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        volumes = replica["spec"]["template"]["spec"]["volumes"]
        assert volumes == [{"name": "model-cache",
                            "persistentVolumeClaim": {"claimName": "sglang-lite-model-cache"}}]


def _by_name(docs: list[dict], kind: str, name: str) -> dict:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def _base() -> list[dict]:
    return [d for p in (K8S / "base").glob("*.yaml") if p.name != "kustomization.yaml" for d in _docs(p)]


def test_replica_probes_router_discovery_and_non_root():
    docs = _base()
    replica = _by_name(docs, "Deployment", "sglang-lite")
    pod = replica["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health_generate"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert "--open-metrics" in c["args"]  # the ServiceMonitor carries no API key
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["model-cache"] == "/cache"
    headless = _by_name(docs, "Service", "sglang-lite-replicas")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == replica["spec"]["selector"]["matchLabels"]
    router = _by_name(docs, "Deployment", "sglang-lite-router")["spec"]["template"]["spec"]["containers"][0]
    dns = router["args"][router["args"].index("--worker-dns") + 1]
    assert dns == f"sglang-lite-replicas:{headless['spec']['ports'][0]['port']}"
    from sglang_lite.router.args import parse_args

    parse_args(router["args"][1:])  # the router accepts its flags as written


def _check_crd(doc: dict) -> None:
    assert set(doc) >= {"apiVersion", "kind", "metadata", "spec"}, doc
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
    if doc["kind"] == "ServiceMonitor":
        assert doc["apiVersion"] == "monitoring.coreos.com/v1"
        assert doc["spec"]["selector"]["matchLabels"]
        for ep in doc["spec"]["endpoints"]:
            assert ep["path"] == "/metrics" and re.fullmatch(r"\d+s", ep["interval"]) and ep["port"]
    else:
        assert doc["apiVersion"] == "keda.sh/v1alpha1"
        spec = doc["spec"]
        assert spec["scaleTargetRef"]["name"] and 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
        for trigger in spec["triggers"]:
            assert trigger["type"] == "prometheus"
            assert set(trigger["metadata"]) >= {"serverAddress", "query", "threshold"}
            float(trigger["metadata"]["threshold"])


def test_autoscaling_follows_the_queue_policy():
    docs = _base()
    scaled = _by_name(docs, "ScaledObject", "sglang-lite")
    assert scaled["spec"]["scaleTargetRef"]["name"] == _by_name(docs, "Deployment", "sglang-lite")["metadata"]["name"]
    behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    up, down = behavior["scaleUp"], behavior["scaleDown"]
    # up: wanted for 2 minutes, one replica at a time, 5-minute cooldown
    assert up["stabilizationWindowSeconds"] == 120
    assert up["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 300}]
    # down: wanted for 5 minutes, one replica at a time, 10-minute cooldown
    assert down["stabilizationWindowSeconds"] == 300
    assert down["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 600}]
    trigger = scaled["spec"]["triggers"][0]
    assert trigger["metricType"] == "AverageValue" and trigger["metadata"]["threshold"] == "1"
    query = trigger["metadata"]["query"]
    assert "> bool 10" in query and "== bool 0" in query and "sglang_lite:num_queue_reqs" in query
    monitor = _by_name(docs, "ServiceMonitor", "sglang-lite")
    labels = monitor["spec"]["selector"]["matchLabels"]
    services = [d for d in docs if d["kind"] == "Service"]
    assert all(labels.items() <= d["metadata"]["labels"].items() for d in services)  # both scraped


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cuda"])
def test_dockerfiles_non_root_healthcheck_cache_volume(name):
    text = (DEPLOY / name).read_text()
    lines = [ln.strip() for ln in text.replace("\\\n", " ").splitlines() if ln.strip() and not ln.startswith("#")]
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), users
    assert any(ln.startswith("HEALTHCHECK") and "/health" in ln for ln in lines)
    assert 'VOLUME ["/cache"]' in lines and "XDG_CACHE_HOME=/cache" in text
    root = DEPLOY.parent
    for ln in lines:
        if ln.startswith("COPY "):
            for src in ln.split()[1:-1]:
                assert (root / src).exists(), src  # the build context is the repository root
    assert lines[-1] == 'CMD ["serve", "--host", "0.0.0.0", "--port", "30000"]'


def _rules() -> dict:
    return yaml.safe_load((DEPLOY / "monitoring" / "alerts.yaml").read_text())


def test_alert_rules_structure_and_thresholds():
    groups = _rules()["groups"]
    alerts = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    assert set(alerts) == {"SglangLiteThroughputBelowBaseline", "SglangLiteTTFTHigh",
                           "SglangLiteKVCacheNearlyFull", "SglangLiteQueueGrowing"}
    assert "0.8 *" in alerts["SglangLiteThroughputBelowBaseline"]["expr"]
    assert alerts["SglangLiteTTFTHigh"]["expr"].endswith("> 2")
    assert alerts["SglangLiteKVCacheNearlyFull"]["expr"].endswith("> 0.9")
    assert "deriv(" in alerts["SglangLiteQueueGrowing"]["expr"]
    for rule in alerts.values():
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["summary"]
        assert re.fullmatch(r"\d+m", rule["for"])


@pytest.mark.parametrize("command", [["check", "rules", "alerts.yaml"],
                                     ["test", "rules", "alerts_test.yaml"]], ids=["check", "unit-tests"])
def test_alert_rules_pass_promtool(command):
    """check: the rules parse; unit tests (alerts_test.yaml): each alert fires on series that
    cross its threshold for its duration, and not before."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not on PATH (Debian package `prometheus`): rules checked structurally only")
    out = subprocess.run([promtool, *command], cwd=DEPLOY / "monitoring", capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dashboard_parses_and_covers_the_panels():
    dash = json.loads((DEPLOY / "monitoring" / "grafana-dashboard.json").read_text())
    titles = " | ".join(p["title"] for p in dash["panels"]).lower()
    for want in ("throughput", "time to first token", "time per output token", "queued",
                 "running", "kv cache", "cache hit rate", "grammar compile", "cache-affinity"):
        assert want in titles, want
    for p in dash["panels"]:
        assert p["targets"] and all(t["expr"] for t in p["targets"])
    assert {v["name"] for v in dash["templating"]["list"]} == {"datasource", "instance"}
