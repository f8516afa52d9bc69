"""docker-compose.yml against the Compose Specification's JSON schema, and its wiring:
ports, healthchecks, the weights volume, GPU reservations and the scale profile."""

from __future__ import annotations

import copy

import jsonschema
import pytest
from deploy_files import (
    COMPOSE_CPU_OVERRIDE,
    COMPOSE_FILE,
    ROOT,
    TRAEFIK_DIR,
    compose_schema,
    dockerfile_instructions,
    interpolate,
    load_yaml,
    merge_compose,
    service_answer,
    stage_env,
)

from service.config import Settings

COMPOSE = load_yaml(COMPOSE_FILE)
SERVICES = COMPOSE["services"]
DOCKERFILE = dockerfile_instructions()
IMAGE_ENV = stage_env(DOCKERFILE, max(ins.stage for ins in DOCKERFILE))
SERVICE_PORT = Settings.model_fields["port"].default

#: Services running the Atelier image (built from this repository's Dockerfile).
ATELIER = {name: svc for name, svc in SERVICES.items() if "build" in svc}
SCALE_REPLICAS = {name: svc for name, svc in ATELIER.items() if "scale" in svc.get("profiles", [])}


def _validator() -> jsonschema.protocols.Validator:
    schema = compose_schema()
    return jsonschema.validators.validator_for(schema)(schema)


def _gpu_devices(service: dict) -> list[dict]:
    return service["deploy"]["resources"]["reservations"]["devices"]


def _port_mapping(spec: str) -> tuple[int, int]:
    host, _, container = interpolate(spec).rpartition(":")
    return int(host), int(container)


def _environment(service: dict) -> dict[str, str | None]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    return env


# ---------------------------------------------------------------- schema
def test_compose_file_is_valid_against_the_compose_specification():
    errors = sorted(_validator().iter_errors(COMPOSE), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]


@pytest.mark.parametrize(
    "breakage",
    [
        lambda c: c["services"]["atelier"].update(ports=8000),
        lambda c: c["services"]["atelier"].update(gpus_please=True),
        lambda c: _gpu_devices(c["services"]["atelier"])[0].update(capabilities="gpu"),
        lambda c: c["services"]["lb"].update(depends_on={"atelier-gpu0": {"condition": "up"}}),
    ],
    ids=[
        "ports-not-a-list",
        "unknown-key",
        "capabilities-not-a-list",
        "unknown-depends-on-condition",
    ],
)
def test_schema_check_rejects_broken_files(breakage):
    broken = copy.deepcopy(COMPOSE)
    breakage(broken)
    assert list(_validator().iter_errors(broken))


def test_cpu_override_merges_into_a_valid_file_without_gpu_reservation():
    merged = merge_compose(COMPOSE, load_yaml(COMPOSE_CPU_OVERRIDE))
    errors = list(_validator().iter_errors(merged))
    assert not errors, [e.message for e in errors]
    atelier = merged["services"]["atelier"]
    assert "deploy" not in atelier
    assert _environment(atelier)["ATELIER_DEVICES"] == "cpu"
    # Everything else of the service is kept.
    assert atelier["healthcheck"] == SERVICES["atelier"]["healthcheck"]
    assert atelier["volumes"] == SERVICES["atelier"]["volumes"]


# ---------------------------------------------------------------- settings and ports
def test_environment_names_are_settings_of_the_service():
    fields = {f"ATELIER_{name.upper()}" for name in Settings.model_fields}
    for name, service in ATELIER.items():
        env = _environment(service)
        unknown = {key for key in env if key.startswith("ATELIER_")} - fields
        assert not unknown, f"{name}: {unknown}"
        # Host and port are the image's (0.0.0.0:8000); compose must not move them.
        assert "ATELIER_HOST" not in env and "ATELIER_PORT" not in env


def test_the_single_service_publishes_the_service_port():
    atelier = SERVICES["atelier"]
    assert "profiles" not in atelier  # what a plain `docker compose up` starts
    (spec,) = atelier["ports"]
    host, container = _port_mapping(spec)
    assert container == SERVICE_PORT == int(IMAGE_ENV["ATELIER_PORT"])
    assert host == 8000


def test_scale_replicas_are_reached_only_through_the_load_balancer():
    assert len(SCALE_REPLICAS) >= 2
    for name, replica in SCALE_REPLICAS.items():
        assert "ports" not in replica, name
    lb = SERVICES["lb"]
    assert lb["profiles"] == ["scale"]
    assert set(lb["depends_on"]) == set(SCALE_REPLICAS)


# ---------------------------------------------------------------- healthchecks
def test_every_atelier_container_checks_healthz_like_the_image():
    (image_check,) = [ins for ins in DOCKERFILE if ins.keyword == "HEALTHCHECK"]
    for name, service in ATELIER.items():
        test = service["healthcheck"]["test"]
        assert test[0] == "CMD" and test[1:] == image_check.exec_form(), name
    status, _ = service_answer("/healthz")
    assert status == 200


def test_load_balancer_has_its_own_healthcheck_on_traefik_ping():
    lb = SERVICES["lb"]
    assert lb["healthcheck"]["test"] == ["CMD", "traefik", "healthcheck", "--ping"]
    static = load_yaml(TRAEFIK_DIR / "traefik.yml")
    ping_entry = static["ping"]["entryPoint"]
    assert ping_entry in static["entryPoints"]


# ---------------------------------------------------------------- weights volume
def test_weights_volume_is_mounted_where_the_service_looks():
    for name, service in ATELIER.items():
        (mount,) = service["volumes"]
        source, target = interpolate(mount).split(":")[:2]
        assert (
            target
            == _environment(service)["ATELIER_WEIGHTS_DIR"]
            == IMAGE_ENV["ATELIER_WEIGHTS_DIR"]
        ), name
        assert source in COMPOSE["volumes"], f"{name}: named volume {source!r} not declared"
    # A host folder instead of the named volume, through the documented variable.
    mount = SERVICES["atelier"]["volumes"][0]
    assert interpolate(mount, {"ATELIER_WEIGHTS_VOLUME": "/srv/w"}) == "/srv/w:/weights"


# ---------------------------------------------------------------- GPUs
def test_single_service_reserves_every_gpu():
    (device,) = _gpu_devices(SERVICES["atelier"])
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]
    assert device["count"] == "all"


def test_scale_replicas_get_one_distinct_gpu_each():
    seen: set[str] = set()
    for name, replica in SCALE_REPLICAS.items():
        (device,) = _gpu_devices(replica)
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
        assert "count" not in device  # count: 1 would hand every replica the same GPU
        (gpu,) = device["device_ids"]
        assert gpu not in seen, f"{name} shares GPU {gpu}"
        seen.add(gpu)
    assert seen == {str(i) for i in range(len(SCALE_REPLICAS))}


# ---------------------------------------------------------------- load balancer
def _traefik_mounts() -> dict[str, str]:
    mounts = {}
    for volume in SERVICES["lb"]["volumes"]:
        source, target = volume.split(":")[:2]
        mounts[target] = source
    return mounts


def test_load_balancer_reads_the_repository_configs():
    mounts = _traefik_mounts()
    for target, source in mounts.items():
        assert (ROOT / source).resolve().is_file(), source
        assert target.startswith("/etc/traefik/")
    assert mounts["/etc/traefik/traefik.yml"].endswith("deploy/traefik/traefik.yml")
    static = load_yaml(TRAEFIK_DIR / "traefik.yml")
    assert static["providers"]["file"]["filename"] in mounts


def test_load_balancer_publishes_its_web_entrypoint():
    static = load_yaml(TRAEFIK_DIR / "traefik.yml")
    (spec,) = SERVICES["lb"]["ports"]
    _, container = _port_mapping(spec)
    web = static["entryPoints"]["web"]["address"]
    assert web == f":{container}"
    dynamic = load_yaml(TRAEFIK_DIR / "dynamic.yml")
    assert dynamic["http"]["routers"]["atelier"]["entryPoints"] == ["web"]


def test_load_balancer_balances_over_every_replica_by_connections_with_health_checks():
    dynamic = load_yaml(TRAEFIK_DIR / "dynamic.yml")
    router = dynamic["http"]["routers"]["atelier"]
    balancer = dynamic["http"]["services"][router["service"]]["loadBalancer"]
    servers = {server["url"] for server in balancer["servers"]}
    assert servers == {f"http://{name}:{SERVICE_PORT}" for name in SCALE_REPLICAS}
    # Fewer requests in flight wins (least-connections between two random replicas).
    assert balancer["strategy"] == "p2c"
    check = balancer["healthcheck"]
    assert check["path"] == "/readyz"
    # The route exists and says "not ready" while no model is loaded, so a replica
    # that is still loading gets no traffic.
    assert service_answer("/no-such-route")[0] == 404
    status, _ = service_answer("/readyz")
    assert status == 503


def test_stop_grace_period_covers_the_drain():
    # `docker compose stop` sends SIGTERM, then SIGKILL after stop_grace_period; the
    # service drains for up to request_timeout_s (the compose file leaves its default).
    timeout_s = Settings.model_fields["request_timeout_s"].default
    for name, service in ATELIER.items():
        grace = service["stop_grace_period"]
        assert grace.endswith("s") and float(grace[:-1]) > timeout_s, name


def test_cpu_override_runs_the_scale_replicas_on_the_cpu():
    merged = merge_compose(COMPOSE, load_yaml(COMPOSE_CPU_OVERRIDE))
    for name in SCALE_REPLICAS:
        replica = merged["services"][name]
        assert "deploy" not in replica, name
        assert _environment(replica)["ATELIER_DEVICES"] == "cpu"
        assert replica["profiles"] == ["scale"]  # still only in the scale profile
        assert replica["healthcheck"] == SERVICES[name]["healthcheck"]


def test_load_balancer_image_is_traefik_unless_named():
    image = SERVICES["lb"]["image"]
    assert interpolate(image) == "traefik:v3.7"
    assert interpolate(image, {"ATELIER_LB_IMAGE": "atelier-traefik:3.7"}) == "atelier-traefik:3.7"


def test_requests_that_reach_no_replica_are_resent():
    dynamic = load_yaml(TRAEFIK_DIR / "dynamic.yml")
    router = dynamic["http"]["routers"]["atelier"]
    (middleware,) = router["middlewares"]
    retry = dynamic["http"]["middlewares"][middleware]["retry"]
    # More attempts than replicas: a pick of the stopped replica is followed by others.
    assert retry["attempts"] > len(SCALE_REPLICAS)
    assert retry["initialInterval"].endswith("ms")
