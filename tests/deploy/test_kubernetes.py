"""The Kubernetes manifests: valid objects (schema-checked offline with the schemas
kubernetes-validate ships; KEDA's ScaledObject, a custom resource it has no schema for,
against the fields KEDA documents), and the two tiers' wiring matched against the
service: roles, probes, ports, settings, keys, the Redis job store, the drain, and the
autoscalers' metrics."""

from __future__ import annotations

import copy
import json
import re
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
from deploy_files import (
    KUBERNETES_DIR,
    REDIS_DIR,
    ROOT,
    dockerfile_instructions,
    load_yaml,
    load_yaml_all,
    redis_config,
    service_answer,
)
from kubernetes_validate.utils import latest_version
from prometheus_client.parser import text_string_to_metric_families

from service.cli import build_parser
from service.cli.serve import uvicorn_config
from service.config import Settings
from service.keys import KeyRing, needs_api_key

#: Oldest Kubernetes these manifests promise to work on, and the newest schemas shipped.
VERSIONS = ("1.30", latest_version())
MANIFEST_FILES = sorted(p for p in KUBERNETES_DIR.glob("*.yaml") if p.name != "kustomization.yaml")
ALL_OBJECTS = [(path.name, doc) for path in MANIFEST_FILES for doc in load_yaml_all(path)]
#: Custom resources (KEDA's): kubernetes-validate has no schema for them.
CUSTOM_GROUPS = ("keda.sh/",)
OBJECTS = [(f, d) for f, d in ALL_OBJECTS if not d["apiVersion"].startswith(CUSTOM_GROUPS)]


def _one(kind: str, name: str | None = None) -> dict:
    (found,) = [
        doc
        for _, doc in ALL_OBJECTS
        if doc["kind"] == kind and name in (None, doc["metadata"]["name"])
    ]
    return found


API = _one("Deployment", "atelier")
WORKER = _one("Deployment", "atelier-worker")
REDIS = _one("StatefulSet", "atelier-redis")
SCALED_OBJECT = _one("ScaledObject")
SETTINGS_MAP = _one("ConfigMap", "atelier-settings")
TIERS = {"api": API, "worker": WORKER}


def _pod(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def _container(workload: dict) -> dict:
    (container,) = _pod(workload)["containers"]
    return container


def _named_port(container: dict, name: str) -> int:
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return port


def _settings(workload: dict, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings the workload's container gets: the ConfigMaps it reads with envFrom,
    then its own env (which wins), nothing else (optional Secrets absent)."""
    container = _container(workload)
    for key in {f"ATELIER_{name.upper()}" for name in Settings.model_fields}:
        monkeypatch.delenv(key, raising=False)
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            for key, value in _one("ConfigMap", source["configMapRef"]["name"])["data"].items():
                monkeypatch.setenv(key, value)
    for variable in container.get("env", []):
        if "value" in variable:
            monkeypatch.setenv(variable["name"], variable["value"])
    return Settings(_env_file=None)


def _matches(selector: dict, labels: dict) -> bool:
    return selector.items() <= labels.items()


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
    broken = copy.deepcopy(WORKER)
    breakage(broken)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[0], strict=True)


def test_kustomization_lists_every_manifest():
    kustomization = load_yaml(KUBERNETES_DIR / "kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(p.name for p in MANIFEST_FILES)


def test_every_custom_resource_is_checked_here():
    assert [d["kind"] for _, d in ALL_OBJECTS if d not in [o for _, o in OBJECTS]] == [
        "ScaledObject"
    ]


# ---------------------------------------------------------------- KEDA ScaledObject
#: The ScaledObject fields used here, as KEDA v2 documents them (keda.sh, "ScaledObject
#: specification" and the prometheus scaler's page); anything else is refused, so a
#: misspelt field fails here rather than being ignored by the cluster.
_BEHAVIOR_RULES = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "stabilizationWindowSeconds": {"type": "integer", "minimum": 0, "maximum": 3600},
        "selectPolicy": {"enum": ["Max", "Min", "Disabled"]},
        "policies": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["type", "value", "periodSeconds"],
                "properties": {
                    "type": {"enum": ["Pods", "Percent"]},
                    "value": {"type": "integer", "minimum": 1},
                    "periodSeconds": {"type": "integer", "minimum": 1, "maximum": 1800},
                },
            },
        },
    },
}
_NUMBER_STRING = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"}
SCALED_OBJECT_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "labels": {"type": "object"}},
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string"},
                        "envSourceContainerName": {"type": "string"},
                    },
                },
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "initialCooldownPeriod": {"type": "integer", "minimum": 0},
                "idleReplicaCount": {"type": "integer", "minimum": 0},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "advanced": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string"},
                                "behavior": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "properties": {
                                        "scaleUp": _BEHAVIOR_RULES,
                                        "scaleDown": _BEHAVIOR_RULES,
                                    },
                                },
                            },
                        },
                    },
                },
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["type", "metadata"],
                        "properties": {
                            "type": {"const": "prometheus"},
                            "name": {"type": "string"},
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                            "authenticationRef": {"type": "object"},
                            "metadata": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["serverAddress", "query", "threshold"],
                                "properties": {
                                    "serverAddress": {"type": "string", "pattern": "^https?://"},
                                    "query": {"type": "string"},
                                    # KEDA reads trigger metadata as strings.
                                    "threshold": _NUMBER_STRING,
                                    "activationThreshold": _NUMBER_STRING,
                                    "namespace": {"type": "string"},
                                    "customHeaders": {"type": "string"},
                                    "ignoreNullValues": {"enum": ["true", "false"]},
                                    "queryParameters": {"type": "string"},
                                    "unsafeSsl": {"enum": ["true", "false"]},
                                    "timeout": _NUMBER_STRING,
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def _scaler_validator() -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(SCALED_OBJECT_SCHEMA)


def _trigger() -> dict:
    (trigger,) = SCALED_OBJECT["spec"]["triggers"]
    return trigger


def test_scaled_object_has_the_documented_structure():
    errors = sorted(_scaler_validator().iter_errors(SCALED_OBJECT), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]


@pytest.mark.parametrize(
    "breakage",
    [
        lambda s: s["spec"].update(minReplicas=1),
        lambda s: s["spec"]["triggers"][0]["metadata"].update(threshold=1),
        lambda s: s["spec"]["triggers"][0]["metadata"].pop("query"),
        lambda s: s["spec"]["scaleTargetRef"].update(deploymentName="atelier-worker"),
    ],
    ids=["hpa-field-name", "threshold-not-a-string", "no-query", "keda-v1-target"],
)
def test_scaled_object_check_rejects_broken_objects(breakage):
    broken = copy.deepcopy(SCALED_OBJECT)
    breakage(broken)
    assert list(_scaler_validator().iter_errors(broken))


def test_workers_are_scaled_by_keda_and_the_api_by_its_autoscaler():
    target = SCALED_OBJECT["spec"]["scaleTargetRef"]
    assert target.get("kind", "Deployment") == "Deployment"
    assert target.get("apiVersion", "apps/v1") == "apps/v1"
    assert target["name"] == WORKER["metadata"]["name"]
    hpa = _one("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == API["metadata"]["name"]
    # An autoscaled Deployment states no replica count: `kubectl apply` would reset it.
    for workload in TIERS.values():
        assert "replicas" not in workload["spec"]


def test_at_least_one_worker_always_runs():
    # The API pods are ready only while some worker serves a model: with none, the
    # Service would route nowhere, no job could queue, and nothing would wake a worker.
    spec = SCALED_OBJECT["spec"]
    assert spec["minReplicaCount"] >= 1
    assert spec["maxReplicaCount"] > spec["minReplicaCount"]
    assert "idleReplicaCount" not in spec
    status, body = service_answer("/readyz")
    assert status == 503 and json.loads(body)["error"]["code"] == "not_ready"


def _exported_series() -> dict[str, str]:
    """Series name -> metric type, for every family of the real app's /metrics."""
    status, body = service_answer("/metrics")
    assert status == 200
    series = {}
    for family in text_string_to_metric_families(body):
        suffixes = {
            "counter": ("_total", "_created"),
            "histogram": ("_bucket", "_sum", "_count", "_created"),
            "gauge": ("",),
        }.get(family.type, ("",))
        for suffix in suffixes:
            series[family.name + suffix] = family.type
    return series


def test_scaler_query_reads_series_the_service_exports():
    query = _trigger()["metadata"]["query"]
    names = set(re.findall(r"\batelier_[a-z_]+", query))
    exported = _exported_series()
    assert names and names <= set(exported), names - set(exported)
    assert "atelier_jobs_queued" in names and exported["atelier_jobs_queued"] == "gauge"
    # rate() only over counters.
    for name in re.findall(r"rate\((\w+)", query):
        assert exported[name] == "counter", name
    # The queue gauge is store-wide (every pod reports the same figure): never summed
    # over pods before a max.
    assert re.search(r"max by \(model\) \(atelier_jobs_queued\)", query)


def test_scaler_asks_for_a_worker_per_full_batch_waiting(monkeypatch):
    # Each worker leases up to max_batch_size jobs per GPU: one more worker per batch
    # left waiting, and the query's value is the worker count (threshold 1 per pod).
    query = _trigger()["metadata"]["query"]
    (per_worker,) = re.findall(r"atelier_jobs_queued\)\) / (\d+)\)", query)
    settings = _settings(WORKER, monkeypatch)
    assert int(per_worker) == settings.max_batch_size
    assert _container(WORKER)["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert _trigger().get("metricType", "AverageValue") == "AverageValue"
    assert float(_trigger()["metadata"]["threshold"]) == 1
    assert "or vector(0)" in query  # no series yet (no worker scraped) reads as 0


def test_api_autoscaler_scales_on_cpu_the_pods_request():
    hpa = _one("HorizontalPodAutoscaler")
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
    assert 0 < metric["resource"]["target"]["averageUtilization"] <= 100
    # Utilization is relative to the request: the pods must request CPU.
    assert _container(API)["resources"]["requests"]["cpu"]
    assert hpa["spec"]["minReplicas"] >= 2  # one keeps answering through a rolling update


# ---------------------------------------------------------------- roles
def test_api_pods_serve_the_api_and_load_no_model(monkeypatch):
    args = build_parser().parse_args(_container(API)["command"][1:])
    assert args.command == "serve"
    assert _container(API)["command"][0] == "atelier"
    assert _settings(API, monkeypatch).load_models == ""
    assert "nvidia.com/gpu" not in _container(API)["resources"].get("limits", {})
    assert "initContainers" not in _pod(API)  # no weights to fetch


def test_worker_pods_run_the_worker_with_models_the_service_knows(monkeypatch):
    from service.workers.registry import MODELS

    args = build_parser().parse_args(_container(WORKER)["command"][1:])
    assert args.command == "worker"
    assert _container(WORKER)["command"][0] == "atelier"
    names = _settings(WORKER, monkeypatch).load_models.split(",")
    assert names and set(names) <= set(MODELS)


def test_both_tiers_share_the_redis_job_store(monkeypatch):
    service = _one("Service", "atelier-redis")
    port = _named_port(_container(REDIS), "redis")
    for name, workload in TIERS.items():
        url = urlsplit(_settings(workload, monkeypatch).redis_url)
        assert url.scheme == "redis", name
        assert url.hostname == service["metadata"]["name"], name
        (service_port,) = service["spec"]["ports"]
        assert url.port == service_port["port"] == port, name


def test_both_tiers_keep_big_results_in_one_bucket_not_on_a_pods_disk(monkeypatch):
    """Pods share no disk: a result a worker wrote must be readable by every API pod."""
    for name, workload in TIERS.items():
        settings = _settings(workload, monkeypatch)
        assert settings.blob_store == "s3" and settings.blob_s3_bucket, name
        secrets = [
            s["secretRef"]["name"] for s in _container(workload)["envFrom"] if "secretRef" in s
        ]
        assert "atelier-s3" in secrets, name


# ---------------------------------------------------------------- ports and probes
@pytest.mark.parametrize("tier", sorted(TIERS))
def test_container_port_is_the_service_port(tier, monkeypatch):
    container = _container(TIERS[tier])
    assert _named_port(container, "http") == _settings(TIERS[tier], monkeypatch).port
    assert _settings(TIERS[tier], monkeypatch).host == "0.0.0.0"


@pytest.mark.parametrize("tier", sorted(TIERS))
@pytest.mark.parametrize(
    ("probe", "path"),
    [("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")],
)
def test_probes_target_the_service_routes(tier, probe, path):
    container = _container(TIERS[tier])
    check = container[probe]["httpGet"]
    assert check["path"] == path
    assert _named_port(container, check["port"]) == _named_port(container, "http")


def test_probe_routes_answer_as_the_probes_expect():
    # Alive at once; not ready while no model is served (the app runs with none here).
    assert service_answer("/healthz")[0] == 200
    assert service_answer("/readyz")[0] == 503
    assert service_answer("/no-such-route")[0] == 404


def test_startup_probe_gives_model_loading_minutes_before_liveness_applies():
    startup = _container(WORKER)["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120


def test_service_routes_to_the_api_pods_only():
    service = _one("Service", "atelier")
    api_labels = API["spec"]["template"]["metadata"]["labels"]
    assert _matches(service["spec"]["selector"], api_labels)
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "http"
    for workload in (WORKER, REDIS):
        assert not _matches(
            service["spec"]["selector"], workload["spec"]["template"]["metadata"]["labels"]
        )


def test_workload_selectors_do_not_overlap():
    workloads = [API, WORKER, REDIS]
    for workload in workloads:
        selector = workload["spec"]["selector"]["matchLabels"]
        for other in workloads:
            labels = other["spec"]["template"]["metadata"]["labels"]
            assert _matches(selector, labels) == (other is workload)


# ---------------------------------------------------------------- GPUs, users, keys
def test_each_worker_requests_one_gpu():
    resources = _container(WORKER)["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == 1
    # Extended resources cannot be overcommitted: a request must equal the limit.
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"]


@pytest.mark.parametrize(
    ("workload", "dockerfile"),
    [(API, ROOT / "Dockerfile"), (WORKER, ROOT / "Dockerfile"), (REDIS, REDIS_DIR / "Dockerfile")],
    ids=["api", "worker", "redis"],
)
def test_pods_run_as_their_images_non_root_user(workload, dockerfile):
    instructions = dockerfile_instructions(dockerfile)
    final = max(ins.stage for ins in instructions)
    (user,) = [ins for ins in instructions if ins.keyword == "USER" and ins.stage == final]
    uid, _, gid = user.arguments.partition(":")
    security = _pod(workload)["securityContext"]
    assert security["runAsNonRoot"] is True
    assert str(security["runAsUser"]) == uid and str(security["runAsGroup"]) == gid
    for container in [*_pod(workload).get("initContainers", []), _container(workload)]:
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_api_keys_file_is_the_mounted_secret(monkeypatch):
    settings = _settings(API, monkeypatch)
    mounts = {m["name"]: m for m in _container(API)["volumeMounts"]}
    volumes = {v["name"]: v for v in _pod(API)["volumes"]}
    (name,) = [n for n, v in volumes.items() if "secret" in v]
    assert str(settings.api_keys_file).startswith(mounts[name]["mountPath"] + "/")
    assert mounts[name]["readOnly"] is True
    # Required: pods wait for the Secret rather than start with no key at all.
    assert not volumes[name]["secret"].get("optional", False)
    assert needs_api_key("/v1/generate", "POST", settings, KeyRing(settings.api_keys_file, None))


def test_workers_metrics_stay_open_to_prometheus(monkeypatch):
    # Workers serve no /v1 route and need no key; with one configured, protecting
    # /metrics would lock Prometheus (and so KEDA) out of the series workers scale on.
    settings = _settings(WORKER, monkeypatch)
    # The Secrets they read hold the webhook signing secret and the blob store's
    # credentials (configmap.yaml's notes), no API key.
    secrets = [s["secretRef"]["name"] for s in _container(WORKER)["envFrom"] if "secretRef" in s]
    assert secrets == ["atelier-webhook", "atelier-s3"]
    assert "ATELIER_WEBHOOK_SECRET=" in (KUBERNETES_DIR / "configmap.yaml").read_text()
    keys = KeyRing(settings.api_keys_file, settings.api_key)
    assert not needs_api_key("/metrics", "GET", settings, keys)
    annotations = WORKER["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] == "/metrics"
    assert int(annotations["prometheus.io/port"]) == _named_port(_container(WORKER), "http")
    # The API pods' /metrics needs a key: no annotation invites a scrape that gets 401.
    assert needs_api_key("/metrics", "GET", _settings(API, monkeypatch), KeyRing(None, "k"))
    assert "prometheus.io/scrape" not in API["spec"]["template"]["metadata"].get("annotations", {})


# ---------------------------------------------------------------- settings and weights
def test_settings_configmap_holds_valid_service_settings(monkeypatch):
    data = SETTINGS_MAP["data"]
    fields = {f"ATELIER_{name.upper()}" for name in Settings.model_fields}
    assert set(data) <= fields
    for workload in TIERS.values():
        container = _container(workload)
        assert {v["name"] for v in container.get("env", [])} <= fields
        refs = [s["configMapRef"]["name"] for s in container["envFrom"] if "configMapRef" in s]
        assert refs == [SETTINGS_MAP["metadata"]["name"]]
        _settings(workload, monkeypatch)  # parses (and range-checks) every value


def test_weights_volume_is_where_the_settings_point(monkeypatch):
    weights_dir = str(_settings(WORKER, monkeypatch).weights_dir)
    pod = _pod(WORKER)
    for container in [*pod["initContainers"], _container(WORKER)]:
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["weights"] == weights_dir, container["name"]
    volumes = {v["name"] for v in pod["volumes"]}
    assert {m["name"] for m in _container(WORKER)["volumeMounts"]} <= volumes


def test_init_container_fetches_weights_named_in_the_manifest():
    (init,) = _pod(WORKER)["initContainers"]
    assert init["image"] == _container(WORKER)["image"]
    assert "atelier weights fetch" in " ".join(init["command"])
    (names_ref,) = [e["valueFrom"]["configMapKeyRef"] for e in init["env"] if "valueFrom" in e]
    names = _one("ConfigMap", names_ref["name"])["data"][names_ref["key"]].split()
    manifest = json.loads((ROOT / "weights" / "manifest.json").read_text())
    known = {checkpoint["name"] for checkpoint in manifest["checkpoints"]}
    assert names and set(names) <= known


def test_fetched_weights_cover_what_the_default_style_transfer_loads():
    pipeline = pytest.importorskip("models.adain.pipeline")
    from models.hub import Manifest

    manifest = Manifest.load()
    needed = {pipeline.ENCODER_FILE, *pipeline.DECODER_FILES.values()}
    owners = {manifest.owner_of(path).name for path in needed}
    names = set(_one("ConfigMap", "atelier-weights")["data"]["names"].split())
    assert owners <= names


# ---------------------------------------------------------------- the drain
@pytest.mark.parametrize("tier", sorted(TIERS))
def test_termination_grace_covers_the_drain(tier, monkeypatch):
    # The kubelet runs preStop, sends SIGTERM, and SIGKILLs at the grace period: the
    # service leaves (drain_grace_s), drains (shutdown_timeout_s), then uvicorn closes
    # its connections (timeout_graceful_shutdown); all of it must fit.
    workload = TIERS[tier]
    settings = _settings(workload, monkeypatch)
    pre_stop = _container(workload).get("lifecycle", {}).get("preStop", {})
    pre_stop_s = pre_stop.get("sleep", {}).get("seconds", 0)
    closing_s = uvicorn_config(None, settings).timeout_graceful_shutdown
    needed = pre_stop_s + settings.drain_grace_s + settings.shutdown_timeout_s + closing_s
    assert _pod(workload)["terminationGracePeriodSeconds"] > needed
    # A request admitted just before the stop may run request_timeout_s, and the job
    # budget (max_image_steps) is sized to finish within it: the drain waits that long.
    assert settings.shutdown_timeout_s >= settings.request_timeout_s


def test_api_pods_leave_the_service_before_the_drain():
    assert _container(API)["lifecycle"]["preStop"]["sleep"]["seconds"] > 0


# ---------------------------------------------------------------- Redis
def test_redis_keeps_its_append_only_file_on_a_claimed_volume():
    config = redis_config()
    assert config["appendonly"] == ["yes"]
    (mount,) = _container(REDIS)["volumeMounts"]
    assert mount["mountPath"] == config["dir"][0]
    (claim,) = REDIS["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == mount["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert REDIS["spec"]["replicas"] == 1  # one primary: the store is not a cluster
    assert _named_port(_container(REDIS), "redis") == int(config["port"][0])
    # No command: the image's, which reads the repository's redis.conf.
    assert "command" not in _container(REDIS) and "args" not in _container(REDIS)


def test_redis_is_reached_through_its_governing_service():
    service = _one("Service", "atelier-redis")
    assert REDIS["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert _matches(service["spec"]["selector"], REDIS["spec"]["template"]["metadata"]["labels"])


@pytest.mark.parametrize("probe", ["readinessProbe", "livenessProbe"])
def test_redis_probes_ask_for_a_pong(probe):
    command = " ".join(_container(REDIS)[probe]["exec"]["command"])
    assert "redis-cli ping" in command and "PONG" in command
