"""The Kubernetes manifests: valid objects (schema-checked offline with the schemas
kubernetes-validate ships), and probes, ports, settings and the autoscaler's metric
matched against the service."""

from __future__ import annotations

import copy
import json
import re

import kubernetes_validate
import pytest
from deploy_files import (
    KUBERNETES_DIR,
    ROOT,
    dockerfile_instructions,
    load_yaml,
    load_yaml_all,
    service_answer,
)
from kubernetes_validate.utils import latest_version

from service.config import Settings

#: Oldest Kubernetes these manifests promise to work on, and the newest schemas shipped.
VERSIONS = ("1.30", latest_version())
MANIFEST_FILES = sorted(p for p in KUBERNETES_DIR.glob("*.yaml") if p.name != "kustomization.yaml")
OBJECTS = [(path.name, doc) for path in MANIFEST_FILES for doc in load_yaml_all(path)]


def _one(kind: str, name: str | None = None) -> dict:
    (found,) = [
        doc for _, doc in OBJECTS if doc["kind"] == kind and name in (None, doc["metadata"]["name"])
    ]
    return found


DEPLOYMENT = _one("Deployment")
POD = DEPLOYMENT["spec"]["template"]["spec"]
(CONTAINER,) = POD["containers"]
SETTINGS_MAP = _one("ConfigMap", "atelier-settings")
ADAPTER_VALUES = load_yaml(KUBERNETES_DIR / "prometheus-adapter" / "values.yaml")


# ---------------------------------------------------------------- schemas
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "obj",
    [doc for _, doc in OBJECTS],
    ids=[f"{f}:{d['kind']}:{d['metadata']['name']}" for f, d in OBJECTS],
)
def test_manifest_is_a_valid_kubernetes_object(obj, version):
    # strict: unknown fields are errors too (a misspelt probe key is not ignored).
    kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"].update(
            httpGett={"path": "/readyz", "port": "http"}
        ),
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(
            containerPort="8000"
        ),
        lambda d: d["spec"].pop("selector"),
    ],
    ids=["misspelt-field", "port-as-string", "missing-selector"],
)
def test_schema_check_rejects_broken_objects(breakage):
    broken = copy.deepcopy(DEPLOYMENT)
    breakage(broken)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[0], strict=True)


def test_kustomization_lists_every_manifest():
    kustomization = load_yaml(KUBERNETES_DIR / "kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(p.name for p in MANIFEST_FILES)


# ---------------------------------------------------------------- ports and probes
def _named_port(name: str) -> int:
    (port,) = [p["containerPort"] for p in CONTAINER["ports"] if p["name"] == name]
    return port


def test_container_port_is_the_service_port():
    default_port = Settings.model_fields["port"].default
    assert _named_port("http") == default_port == int(SETTINGS_MAP["data"]["ATELIER_PORT"])


@pytest.mark.parametrize(
    ("probe", "path"),
    [("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")],
)
def test_probes_target_the_service_routes(probe, path):
    check = CONTAINER[probe]["httpGet"]
    assert check["path"] == path
    assert _named_port(check["port"]) == _named_port("http")


def test_probe_routes_answer_as_the_probes_expect():
    # Alive at once; not ready until models are loaded (the app runs without them here).
    assert service_answer("/healthz")[0] == 200
    assert service_answer("/readyz")[0] == 503
    assert service_answer("/no-such-route")[0] == 404


def test_startup_probe_gives_model_loading_minutes_before_liveness_applies():
    startup = CONTAINER["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120


def test_service_routes_to_the_pods_http_port():
    service = _one("Service")
    pod_labels = DEPLOYMENT["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert DEPLOYMENT["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "http"


# ---------------------------------------------------------------- GPUs and security
def test_each_pod_requests_one_gpu():
    resources = CONTAINER["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == 1
    # Extended resources cannot be overcommitted: a request must equal the limit.
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"]


def test_pods_run_as_the_images_non_root_user():
    (user,) = [ins for ins in dockerfile_instructions() if ins.keyword == "USER"]
    uid, _, gid = user.arguments.partition(":")
    security = POD["securityContext"]
    assert security["runAsNonRoot"] is True
    assert str(security["runAsUser"]) == uid and str(security["runAsGroup"]) == gid
    for container in [*POD["initContainers"], CONTAINER]:
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


# ---------------------------------------------------------------- settings and weights
def test_settings_configmap_holds_valid_service_settings(monkeypatch):
    data = SETTINGS_MAP["data"]
    fields = {f"ATELIER_{name.upper()}" for name in Settings.model_fields}
    assert set(data) <= fields
    for key, value in data.items():
        monkeypatch.setenv(key, value)
    settings = Settings(_env_file=None)  # parses (and range-checks) every value
    assert settings.host == "0.0.0.0"
    assert settings.port == _named_port("http")
    refs = [
        source["configMapRef"]["name"]
        for source in CONTAINER["envFrom"]
        if "configMapRef" in source
    ]
    assert refs == [SETTINGS_MAP["metadata"]["name"]]


def test_weights_volume_is_where_the_settings_point():
    weights_dir = SETTINGS_MAP["data"]["ATELIER_WEIGHTS_DIR"]
    for container in [*POD["initContainers"], CONTAINER]:
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["weights"] == weights_dir, container["name"]
    volumes = {v["name"] for v in POD["volumes"]}
    assert {m["name"] for m in CONTAINER["volumeMounts"]} <= volumes


def test_init_container_fetches_weights_named_in_the_manifest():
    (init,) = POD["initContainers"]
    assert init["image"] == CONTAINER["image"]
    assert "atelier weights fetch" in " ".join(init["command"])
    (names_ref,) = [e["valueFrom"]["configMapKeyRef"] for e in init["env"] if "valueFrom" in e]
    names = _one("ConfigMap", names_ref["name"])["data"][names_ref["key"]].split()
    manifest = json.loads((ROOT / "weights" / "manifest.json").read_text())
    known = {checkpoint["name"] for checkpoint in manifest["checkpoints"]}
    assert names and set(names) <= known


# ---------------------------------------------------------------- autoscaling
def _adapter_rule() -> dict:
    (rule,) = ADAPTER_VALUES["rules"]["custom"]
    return rule


def test_autoscaler_scales_the_deployment_on_queue_depth_per_pod():
    hpa = _one("HorizontalPodAutoscaler")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", DEPLOYMENT["metadata"]["name"])
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == _adapter_rule()["name"]["as"]
    assert metric["pods"]["target"]["type"] == "AverageValue"


def test_autoscaler_target_is_reachable_before_queues_overflow():
    hpa = _one("HorizontalPodAutoscaler")
    (metric,) = hpa["spec"]["metrics"]
    target = float(metric["pods"]["target"]["averageValue"])
    data = SETTINGS_MAP["data"]
    assert 0 < target < int(data["ATELIER_QUEUE_SIZE"])  # else 429s come before scaling
    assert (
        hpa["spec"]["minReplicas"] >= 1 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    )


def test_adapter_serves_the_gauge_the_service_exports():
    rule = _adapter_rule()
    (series,) = re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{", rule["seriesQuery"])
    assert re.fullmatch(rule["name"]["matches"], series)
    assert rule["resources"]["overrides"]["pod"]["resource"] == "pod"
    # The series is in the real app's /metrics, as a gauge.
    status, body = service_answer("/metrics")
    assert status == 200
    assert f"# TYPE {series} gauge" in body.splitlines()


def test_pods_are_scraped_on_the_metrics_port():
    annotations = DEPLOYMENT["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] == "/metrics"
    assert int(annotations["prometheus.io/port"]) == _named_port("http")


def test_termination_grace_covers_the_drain():
    # SIGTERM makes the service wait up to request_timeout_s for requests in flight;
    # the kubelet must not SIGKILL it before that (plus the preStop pause).
    timeout_s = float(SETTINGS_MAP["data"]["ATELIER_REQUEST_TIMEOUT_S"])
    pre_stop = CONTAINER["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert POD["terminationGracePeriodSeconds"] > pre_stop + timeout_s


def test_fetched_weights_cover_what_the_default_style_transfer_loads():
    pipeline = pytest.importorskip("models.adain.pipeline")
    from models.hub import Manifest

    manifest = Manifest.load()
    needed = {pipeline.ENCODER_FILE, *pipeline.DECODER_FILES.values()}
    owners = {manifest.owner_of(path).name for path in needed}
    names = set(_one("ConfigMap", "atelier-weights")["data"]["names"].split())
    assert owners <= names
