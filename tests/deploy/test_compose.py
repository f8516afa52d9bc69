"""docker-compose.yml against the Compose Specification's JSON schema, and its wiring:
ports, healthchecks, the weights and state volumes, GPU reservations, the scale profile
and its Redis, and the stop grace period against the service's drain."""

from __future__ import annotations

import copy
import re
from urllib.parse import urlsplit

import jsonschema
import pytest
from deploy_files import (
    COMPOSE_CPU_OVERRIDE,
    COMPOSE_FILE,
    REDIS_DIR,
    ROOT,
    TRAEFIK_DIR,
    compose_schema,
    dockerfile_instructions,
    interpolate,
    load_yaml,
    merge_compose,
    redis_config,
    service_answer,
    stage_env,
)

from service.cli import build_parser
from service.cli.serve import uvicorn_config
from service.config import Settings

COMPOSE = load_yaml(COMPOSE_FILE)
SERVICES = COMPOSE["services"]
DOCKERFILE = dockerfile_instructions()
IMAGE_ENV = stage_env(DOCKERFILE, max(ins.stage for ins in DOCKERFILE))
SERVICE_PORT = Settings.model_fields["port"].default

#: Services running the Atelier image (built from this repository's Dockerfile).
ATELIER = {
    name: svc for name, svc in SERVICES.items() if svc.get("build", {}).get("context") == "."
}
REDIS = SERVICES["redis"]
SCALE = {name: svc for name, svc in ATELIER.items() if "scale" in svc.get("profiles", [])}
#: The scale profile's two tiers: GPU workers (`atelier worker`) and API replicas.
SCALE_WORKERS = {
    name: svc for name, svc in SCALE.items() if svc.get("command", [""])[-1] == "worker"
}
SCALE_API = {name: svc for name, svc in SCALE.items() if name not in SCALE_WORKERS}


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


def _mounts(service: dict) -> dict[str, str]:
    """Mount target -> source (a named volume or a host path), interpolated."""
    mounts = {}
    for spec in service.get("volumes", []):
        source, target = interpolate(spec).split(":")[:2]
        mounts[target] = source
    return mounts


def _settings_of(service: dict, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings the service's container gets: its environment as compose resolves
    it with nothing set in the shell (pass-through names stay unset), over the image's."""
    for key in {f"ATELIER_{name.upper()}" for name in Settings.model_fields}:
        monkeypatch.delenv(key, raising=False)
    for key, value in {**IMAGE_ENV, **_environment(service)}.items():
        if key.startswith("ATELIER_") and value is not None:
            monkeypatch.setenv(key, interpolate(value))
    return Settings(_env_file=None)


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
    assert len(SCALE_API) >= 2 and len(SCALE_WORKERS) >= 2
    for name, replica in SCALE.items():
        assert "ports" not in replica, name
    lb = SERVICES["lb"]
    assert lb["profiles"] == ["scale"]
    assert set(lb["depends_on"]) == set(SCALE_API)


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


# ---------------------------------------------------------------- volumes
def test_weights_volume_is_mounted_where_the_service_looks():
    for name, service in ATELIER.items():
        source = _mounts(service)[IMAGE_ENV["ATELIER_WEIGHTS_DIR"]]
        assert _environment(service)["ATELIER_WEIGHTS_DIR"] == IMAGE_ENV["ATELIER_WEIGHTS_DIR"]
        assert source in COMPOSE["volumes"], f"{name}: named volume {source!r} not declared"
    # A host folder instead of the named volume, through the documented variable.
    mount = SERVICES["atelier"]["volumes"][0]
    assert interpolate(mount, {"ATELIER_WEIGHTS_VOLUME": "/srv/w"}) == "/srv/w:/weights"


def test_job_store_lives_on_a_named_volume(monkeypatch):
    # The single service keeps its jobs in SQLite under state_dir: on a named volume
    # (declared, so `docker compose down` without -v keeps it) they survive a restart.
    single = SERVICES["atelier"]
    settings = _settings_of(single, monkeypatch)
    assert settings.redis_url is None
    state_dir = str(settings.state_dir)
    assert state_dir == IMAGE_ENV["ATELIER_STATE_DIR"]
    assert _mounts(single)[state_dir] in COMPOSE["volumes"]
    # The image makes that folder and gives it to the service user (a named volume
    # mounted on it starts with the folder's owner).
    (user,) = [ins for ins in DOCKERFILE if ins.keyword == "USER"]
    owner = user.arguments.split(":")[0]
    setup = " ".join(ins.arguments for ins in DOCKERFILE if ins.keyword == "RUN")
    assert f"mkdir /weights {state_dir}" in setup
    assert f"chown atelier:atelier /weights {state_dir}" in setup
    assert "--uid " + owner in setup


def test_named_keys_file_path_in_the_comments_is_on_the_state_volume():
    text = COMPOSE_FILE.read_text()
    (path,) = set(re.findall(r"keys add NAME --file (\S+)", text))
    assert f"ATELIER_API_KEYS_FILE={path}" in text
    assert path.startswith(IMAGE_ENV["ATELIER_STATE_DIR"] + "/")


# ---------------------------------------------------------------- GPUs
def test_single_service_reserves_every_gpu():
    (device,) = _gpu_devices(SERVICES["atelier"])
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]
    assert device["count"] == "all"


def test_scale_workers_get_one_distinct_gpu_each_and_api_replicas_none():
    for name, replica in SCALE_API.items():
        assert "deploy" not in replica, name
    seen: set[str] = set()
    for name, replica in SCALE_WORKERS.items():
        (device,) = _gpu_devices(replica)
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
        assert "count" not in device  # count: 1 would hand every replica the same GPU
        (gpu,) = device["device_ids"]
        assert gpu not in seen, f"{name} shares GPU {gpu}"
        seen.add(gpu)
    assert seen == {str(i) for i in range(len(SCALE_WORKERS))}


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
    assert servers == {f"http://{name}:{SERVICE_PORT}" for name in SCALE_API}
    # Fewer requests in flight wins (least-connections between two random replicas).
    assert balancer["strategy"] == "p2c"
    check = balancer["healthcheck"]
    assert check["path"] == "/readyz"
    # The route exists and says "not ready" while no model is loaded, so a replica
    # that is still loading gets no traffic.
    assert service_answer("/no-such-route")[0] == 404
    status, _ = service_answer("/readyz")
    assert status == 503


@pytest.mark.parametrize("name", sorted(ATELIER))
def test_stop_grace_period_covers_the_drain(name, monkeypatch):
    # `docker compose stop` sends SIGTERM, then SIGKILL after stop_grace_period. The
    # service leaves for drain_grace_s, drains for up to shutdown_timeout_s, then uvicorn
    # waits timeout_graceful_shutdown for its connections: all of it must fit.
    service = ATELIER[name]
    settings = _settings_of(service, monkeypatch)
    closing_s = uvicorn_config(None, settings).timeout_graceful_shutdown
    grace = service["stop_grace_period"]
    assert grace.endswith("s")
    assert float(grace[:-1]) > settings.drain_grace_s + settings.shutdown_timeout_s + closing_s
    # A synchronous request admitted just before the stop may run request_timeout_s:
    # the drain waits for it.
    assert settings.shutdown_timeout_s >= settings.request_timeout_s


@pytest.mark.parametrize("name", sorted(SCALE_API))
def test_api_replicas_leave_traefiks_rotation_before_they_refuse(name, monkeypatch):
    # /readyz fails at once on SIGTERM; new requests are still served drain_grace_s,
    # longer than Traefik's health-check interval, so it stops routing there first.
    settings = _settings_of(SCALE_API[name], monkeypatch)
    dynamic = load_yaml(TRAEFIK_DIR / "dynamic.yml")
    interval = dynamic["http"]["services"]["atelier"]["loadBalancer"]["healthcheck"]["interval"]
    assert settings.drain_grace_s > float(interval.removesuffix("s"))


def test_environment_defaults_are_valid_settings(monkeypatch):
    for service in ATELIER.values():
        _settings_of(service, monkeypatch)  # parses (and range-checks) every value


def test_cpu_override_runs_the_scale_workers_on_the_cpu():
    merged = merge_compose(COMPOSE, load_yaml(COMPOSE_CPU_OVERRIDE))
    for name in SCALE_WORKERS:
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
    assert retry["attempts"] > len(SCALE_API)
    assert retry["initialInterval"].endswith("ms")


# ---------------------------------------------------------------- Redis (scale profile)
def test_scale_tiers_share_the_redis_service(monkeypatch):
    config = redis_config()
    for name, replica in SCALE.items():
        url = urlsplit(_settings_of(replica, monkeypatch).redis_url)
        assert url.scheme == "redis", name
        assert (url.hostname, url.port) == ("redis", int(config["port"][0])), name
        assert replica["depends_on"]["redis"] == {"condition": "service_healthy"}, name
    # An external Redis instead, through the same variable.
    spec = _environment(SCALE["atelier-gpu0"])["ATELIER_REDIS_URL"]
    assert interpolate(spec, {"ATELIER_REDIS_URL": "redis://db:6380/2"}) == "redis://db:6380/2"
    # The single service keeps the embedded store unless told otherwise.
    assert _environment(SERVICES["atelier"])["ATELIER_REDIS_URL"] is None


def test_redis_keeps_an_append_only_file_on_a_named_volume():
    assert REDIS["profiles"] == ["scale"]
    assert "ports" not in REDIS  # reached on the compose network only
    config = redis_config()
    assert config["appendonly"] == ["yes"]
    assert config["appendfsync"] in (["always"], ["everysec"])
    assert config["maxmemory-policy"] == ["noeviction"]  # an evicted key is a lost job
    source = _mounts(REDIS)[config["dir"][0]]
    assert source in COMPOSE["volumes"]
    # No command: the image's, which reads the repository's redis.conf.
    assert "command" not in REDIS
    redis_dockerfile = dockerfile_instructions(REDIS_DIR / "Dockerfile")
    (cmd,) = [ins for ins in redis_dockerfile if ins.keyword == "CMD"]
    (copy,) = [ins for ins in redis_dockerfile if ins.keyword == "COPY"]
    assert copy.arguments.split() == ["redis.conf", cmd.exec_form()[1]]
    assert cmd.exec_form()[0] == "redis-server"


def test_redis_is_built_on_the_same_base_as_the_atelier_image():
    assert REDIS["build"]["context"] == "deploy/redis"
    base = interpolate(REDIS["build"]["args"]["BASE_IMAGE"])
    assert base == interpolate(ATELIER["atelier"]["build"]["args"]["PYTHON_IMAGE"])
    env = {"ATELIER_BASE_IMAGE": "atelier-base:bookworm"}
    assert interpolate(REDIS["build"]["args"]["BASE_IMAGE"], env) == "atelier-base:bookworm"
    assert interpolate(ATELIER["atelier"]["build"]["args"]["PYTHON_IMAGE"], env) == (
        "atelier-base:bookworm"
    )


def test_redis_healthcheck_asks_for_a_pong():
    test = REDIS["healthcheck"]["test"]
    assert test[0] == "CMD" and "redis-cli ping" in " ".join(test) and "PONG" in test[-1]


# ---------------------------------------------------------------- roles (scale profile)
@pytest.mark.parametrize("name", sorted(SCALE_API))
def test_api_replicas_serve_the_api_and_load_no_model(name, monkeypatch):
    replica = SCALE_API[name]
    assert "command" not in replica  # the image's CMD: atelier serve
    (cmd,) = [ins for ins in DOCKERFILE if ins.keyword == "CMD"]
    assert build_parser().parse_args(cmd.exec_form()[1:]).command == "serve"
    assert _settings_of(replica, monkeypatch).load_models == ""


@pytest.mark.parametrize("name", sorted(SCALE_WORKERS))
def test_workers_run_the_worker_with_models_the_service_knows(name, monkeypatch):
    from service.workers.registry import MODELS

    worker = SCALE_WORKERS[name]
    assert worker["command"][0] == "atelier"
    assert build_parser().parse_args(worker["command"][1:]).command == "worker"
    names = _settings_of(worker, monkeypatch).load_models.split(",")
    assert names and set(names) <= set(MODELS)
