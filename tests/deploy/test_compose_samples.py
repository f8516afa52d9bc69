"""deploy/compose.samples.yml: the override that mounts a folder of sample images for
the page into the services that serve it."""

from __future__ import annotations

import jsonschema
import pytest
from deploy_files import COMPOSE_FILE, ROOT, compose_schema, interpolate, load_yaml, merge_compose

from service.config import Settings

SAMPLES_OVERRIDE = ROOT / "deploy" / "compose.samples.yml"
COMPOSE = load_yaml(COMPOSE_FILE)
OVERRIDE = load_yaml(SAMPLES_OVERRIDE)


def _target(spec: str) -> str:
    return interpolate(spec).split(":")[1]


def _merged() -> dict:
    """The override merged as compose merges it: volumes by their mount target."""
    merged = merge_compose(COMPOSE, OVERRIDE)
    for name, service in OVERRIDE["services"].items():
        base = COMPOSE["services"][name].get("volumes", [])
        targets = {_target(spec) for spec in service["volumes"]}
        kept = [spec for spec in base if _target(spec) not in targets]
        merged["services"][name]["volumes"] = kept + service["volumes"]
    return merged


def test_the_merged_file_is_valid_and_keeps_the_other_volumes():
    merged = _merged()
    schema = compose_schema()
    errors = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(merged))
    assert not errors, [e.message for e in errors]
    atelier = merged["services"]["atelier"]
    assert {_target(spec) for spec in atelier["volumes"]} == {"/weights", "/state", "/samples"}
    assert "atelier-samples" in merged["volumes"]


def test_the_services_that_serve_the_page_get_the_folder_read_only(monkeypatch):
    page_services = {
        name
        for name, service in COMPOSE["services"].items()
        if service.get("build", {}).get("context") == "."
        and "worker" not in service.get("command", [])
    }
    assert set(OVERRIDE["services"]) == page_services
    for name, service in OVERRIDE["services"].items():
        (spec,) = service["volumes"]
        source, target, mode = interpolate(spec).split(":")
        assert (source, mode) == ("atelier-samples", "ro"), name
        assert interpolate(spec, {"ATELIER_SAMPLES_VOLUME": "/srv/x"}).startswith("/srv/x:")
        monkeypatch.setenv("ATELIER_SAMPLES_DIR", service["environment"]["ATELIER_SAMPLES_DIR"])
        assert str(Settings(_env_file=None).samples_dir) == target, name


@pytest.mark.parametrize("doc", ["docs/deployment.md"])
def test_the_override_is_documented(doc):
    assert "deploy/compose.samples.yml" in (ROOT / doc).read_text()
