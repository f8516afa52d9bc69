"""Readers for the deployment files, shared by the tests in tests/deploy.

Docker, compose and Kubernetes do not run here, so these helpers read their files the
way those tools do, for the parts the tests check: YAML with compose's merge tags,
``${VAR:-default}`` interpolation, Dockerfile instructions per stage, and
``.dockerignore`` matching.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
COMPOSE_FILE = ROOT / "docker-compose.yml"
COMPOSE_CPU_OVERRIDE = ROOT / "deploy" / "compose.cpu.yml"
TRAEFIK_DIR = ROOT / "deploy" / "traefik"
REDIS_DIR = ROOT / "deploy" / "redis"
KUBERNETES_DIR = ROOT / "deploy" / "kubernetes"
DEPLOYMENT_DOC = ROOT / "docs" / "deployment.md"


def deploy_script(name: str) -> ModuleType:
    """The script ``deploy/<name>.py`` imported as a module (``deploy/`` is not a package)."""
    sys.path.insert(0, str(ROOT / "deploy"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "deploy"))


# ---------------------------------------------------------------- YAML (compose tags)
class Reset:
    """Compose's ``!reset``: the key is removed from the merged file."""

    def __repr__(self) -> str:
        return "!reset"


class _ComposeLoader(yaml.SafeLoader):
    """SafeLoader that also reads compose's ``!reset`` and ``!override`` tags."""


def _construct_reset(loader: yaml.SafeLoader, node: yaml.Node) -> Reset:
    return Reset()


def _construct_override(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


_ComposeLoader.add_constructor("!reset", _construct_reset)
_ComposeLoader.add_constructor("!override", _construct_override)


def load_yaml(path: Path) -> Any:
    """One YAML document (merge keys ``<<`` resolved, compose tags understood)."""
    return yaml.load(path.read_text(), Loader=_ComposeLoader)  # noqa: S506 (SafeLoader subclass)


def load_yaml_all(path: Path) -> list[Any]:
    return [doc for doc in yaml.load_all(path.read_text(), Loader=_ComposeLoader) if doc]


def merge_compose(base: Any, override: Any) -> Any:
    """Merge an override file into a base one as ``docker compose -f a -f b`` does.

    Mappings merge key by key, ``!reset`` removes a key, anything else replaces.
    (Compose also appends some sequences, e.g. ``ports``; the tests' override has none.)
    """
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            if isinstance(value, Reset):
                merged.pop(key, None)
            elif key in merged:
                merged[key] = merge_compose(merged[key], value)
            else:
                merged[key] = value
        return merged
    return override


_INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::?-(?P<default>[^}]*))?\}")


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Resolve ``${VAR}``, ``${VAR-default}`` and ``${VAR:-default}`` against ``env``."""
    env = env or {}

    def replace(match: re.Match[str]) -> str:
        name, default = match["name"], match["default"]
        if env.get(name):
            return env[name]
        return default or ""

    return _INTERPOLATION.sub(replace, value)


@cache
def compose_schema() -> dict:
    """The Compose Specification's JSON schema, as vendored by check-jsonschema."""
    from importlib.resources import files

    path = files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json")
    return json.loads(path.read_text())


# ---------------------------------------------------------------- redis.conf
def redis_config(path: Path = REDIS_DIR / "redis.conf") -> dict[str, list[str]]:
    """Directive -> its arguments, as redis-server reads its configuration file (one
    directive a line, ``#`` comments, double-quoted arguments; the last one wins)."""
    config: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            directive, *arguments = shlex.split(line)
            config[directive.lower()] = arguments
    return config


# ---------------------------------------------------------------- Dockerfile
@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    arguments: str  # the rest of the (joined) line
    stage: int  # index of the build stage it belongs to (-1 before the first FROM)

    def exec_form(self) -> list[str] | None:
        """The JSON array of an exec-form CMD/ENTRYPOINT/RUN (or HEALTHCHECK's CMD)."""
        text = self.arguments
        if self.keyword == "HEALTHCHECK":
            text = text[text.index("CMD") + 3 :]
        text = text.strip()
        return json.loads(text) if text.startswith("[") else None


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    instructions: list[Instruction] = []
    stage, pending = -1, ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, arguments = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(keyword, " ".join(arguments.split()), stage))
    return instructions


def stage_env(instructions: list[Instruction], stage: int) -> dict[str, str]:
    """``ENV`` values set in one stage (``KEY=value`` form)."""
    env: dict[str, str] = {}
    for ins in instructions:
        if ins.stage == stage and ins.keyword == "ENV":
            for token in shlex.split(ins.arguments):
                key, _, value = token.partition("=")
                env[key] = value
    return env


def shell_commands(script: str) -> list[str]:
    """Split a shell line on ``&&``, ``;`` and newlines into single commands."""
    parts = re.split(r"&&|;|\n", script)
    return [" ".join(part.split()) for part in parts if part.strip()]


# ---------------------------------------------------------------- .dockerignore
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore pattern (Go filepath.Match plus ``**``) as a regex."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def dockerignore_rules(path: Path = DOCKERIGNORE) -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line[1:].strip() if negated else line
        pattern = pattern.strip("/")
        rules.append((negated, _pattern_regex(pattern)))
    return rules


def is_ignored(relative_path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether the build context leaves ``relative_path`` out: the last matching rule
    wins, and a rule matching a parent folder matches everything inside it."""
    parts = relative_path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for negated, regex in rules:
        if any(regex.fullmatch(candidate) for candidate in candidates):
            ignored = not negated
    return ignored


# ---------------------------------------------------------------- the service
@cache
def service_responses() -> dict[str, tuple[int, str]] | None:
    """``GET`` status and body of the probe and metrics routes from the real app, or
    None while ``service.app`` is not importable yet.

    The app runs its lifespan (its job store opens, in a temporary state folder) with no
    model to load and no worker elsewhere, as a container is before any model is loaded:
    ``/healthz`` answers, ``/readyz`` says not ready.
    """
    try:
        from service.app import create_app
    except ImportError:
        return None
    from fastapi.testclient import TestClient

    from service.config import Settings

    answers = {}
    with tempfile.TemporaryDirectory(prefix="atelier-state-") as state:
        settings = Settings(_env_file=None, load_models="", state_dir=state)
        with TestClient(create_app(settings)) as client:
            for path in ("/healthz", "/readyz", "/metrics", "/no-such-route"):
                response = client.get(path)
                answers[path] = (response.status_code, response.text)
    return answers


def service_answer(path: str) -> tuple[int, str]:
    """Status and body the real app gives ``GET path``; skips the calling test while
    ``service.app`` is not importable yet."""
    import pytest

    answers = service_responses()
    if answers is None:
        pytest.skip("service.app is not importable yet")
    return answers[path]
