"""The package layout and dependency direction promised in docs/architecture.md."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _imported_top_levels(package: str) -> set[str]:
    names: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def test_norms_imports_nothing_of_the_project():
    assert not _imported_top_levels("norms") & {"models", "service"}


def test_models_never_import_service():
    assert "service" not in _imported_top_levels("models")


def test_benchmarks_never_edit_sys_path():
    """They run against the installed package (``python benchmarks/x.py``)."""
    for path in (ROOT / "benchmarks").glob("*.py"):
        tree = ast.parse(path.read_text())
        edits = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        ]
        assert not edits, f"{path.name} touches sys.path"


def test_served_packages_never_import_evaluation_code():
    """The scorer, the probes and scipy (the ``eval`` extra) stay out of the served code."""
    for package in ("norms", "models", "service"):
        assert not _imported_top_levels(package) & {"evaluation", "scipy"}, package


def test_samplers_know_nothing_of_the_dit():
    for path in (ROOT / "models" / "diffusion").rglob("*.py"):
        tree = ast.parse(path.read_text())
        modules = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        } | {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        assert not any(m.startswith("models.dit") for m in modules), path


# ------------------------------------------------------------- inside the service
#: The service's layers, lowest first. A module imports only from layers below its own,
#: or from its own package: the job store and the worker pools know nothing of each
#: other (the executor joins them), nothing below the routes reads a request, and only
#: the app assembles the routes. Every module of ``service/`` must be placed here.
SERVICE_LAYERS: tuple[tuple[str, ...], ...] = (
    (  # the foundation: one module each, free to import one another
        "service.batching",
        "service.config",
        "service.errors",
        "service.images",
        "service.keys",
        "service.metrics",
        "service.model_types",
        "service.priorities",
        "service.protocol",
    ),
    ("service.jobs", "service.workers"),  # the durable queue; the models and batchers
    ("service.execution",),  # where a model is served; how work runs: now, as a job, or waited
    ("service.routes",),
    ("service.app",),
    ("service.cli",),
)


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


#: The same for ``models/``: the building blocks (free to import one another), then the
#: two model families and the shapes world, which know nothing of each other, then the
#: text-to-image pipeline that joins diffusion and the shapes.
MODELS_LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "models.bands",
        "models.checkpoints",
        "models.control",
        "models.decoder",
        "models.devices",
        "models.disk_picture",
        "models.flow",
        "models.hub",
        "models.images",
        "models.jpeg_strips",
        "models.png",
        "models.temporal",
        "models.text_encoder",
        "models.vgg",
        "models.video",
    ),
    ("models.adain", "models.diffusion", "models.shapes"),
    ("models.things",),  # the everyday-things world holds the shapes world's scenes
    ("models.dit",),
)


def _modules(package: str) -> dict[str, set[str]]:
    """Every module of ``package`` and the modules of it that it imports (at any depth
    of its code: function-level and ``TYPE_CHECKING`` imports count; ``from p import m``
    imports ``p.m``)."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    imported.add(name if _is_module(name) else node.module)
        found[module] = {name for name in imported if name.startswith(package + ".")}
    return found


def _place(module: str, layers: tuple[tuple[str, ...], ...]) -> tuple[int, str] | None:
    """``(layer, package)`` of a module (the package: the layer entry it falls under), or
    ``None`` for a name that is no module of a placed package."""
    for layer, packages in enumerate(layers):
        for package in packages:
            if module == package or module.startswith(package + "."):
                return layer, package
    return None


def _upward_imports(
    modules: dict[str, set[str]], layers: tuple[tuple[str, ...], ...] = SERVICE_LAYERS
) -> list[str]:
    """``importer -> imported`` for every import that does not run down the layers."""
    wrong = []
    for module, imported in sorted(modules.items()):
        here = _place(module, layers)
        if here is None:
            continue
        for name in sorted(imported):
            there = _place(name, layers)
            if there is None or there[1] == here[1]:
                continue
            if there[0] > here[0] or (there[0] == here[0] and here[0] > 0):
                wrong.append(f"{module} -> {name}")
    return wrong


@pytest.mark.parametrize(
    ("package", "layers"), [("service", SERVICE_LAYERS), ("models", MODELS_LAYERS)]
)
def test_every_module_has_a_layer(package, layers):
    unplaced = [m for m in _modules(package) if m != package and _place(m, layers) is None]
    assert not unplaced, f"place these in the layers of {package}: {unplaced}"


def test_service_imports_only_run_down_its_layers():
    """No import runs upward: jobs and workers never import each other (nor execution,
    the catalog or the routes), execution never imports the routes, and no module but
    the app (and the CLI above it) imports the routes."""
    assert not _upward_imports(_modules("service"))


def test_models_imports_only_run_down_its_layers():
    """The building blocks import no model family; style transfer, diffusion and the
    shapes world never import one another; the things world sits above them (it holds the
    shapes world's scenes); nothing imports the text-to-image pipeline."""
    assert not _upward_imports(_modules("models"), MODELS_LAYERS)
    wrong = {"models.adain.video": {"models.diffusion.process"}, "models.vgg": {"models.dit"}}
    assert _upward_imports(wrong, MODELS_LAYERS) == [
        "models.adain.video -> models.diffusion.process",
        "models.vgg -> models.dit",
    ]


def test_the_layer_check_sees_a_wrong_import():
    """The check above can fail: a pool that reached into the job records (as it once
    did for the priorities), a store that ran work, a route imported from below, a model
    kind that named the work which sends it."""
    modules = {
        "service.workers.pool": {"service.jobs.records"},
        "service.jobs.sqlite_store": {"service.execution.work"},
        "service.execution.executor": {"service.routes.deps"},
        "service.workers.registry": {"service.execution.stylize"},
        "service.priorities": {"service.errors"},  # the foundation's own: fine
    }
    assert _upward_imports(modules) == [
        "service.execution.executor -> service.routes.deps",
        "service.jobs.sqlite_store -> service.execution.work",
        "service.workers.pool -> service.jobs.records",
        "service.workers.registry -> service.execution.stylize",
    ]


def _cycle(modules: dict[str, set[str]]) -> list[str]:
    """One import cycle among ``modules`` (``[a, b, ..., a]``), or ``[]``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for name in sorted(modules.get(module, ())):
            if state.get(name) == 1:
                return [*path[path.index(name) :], name]
            if name in modules and name not in state and (found := visit(name)):
                return found
        path.pop()
        state[module] = 2
        return []

    for module in sorted(modules):
        if module not in state and (found := visit(module)):
            return found
    return []


@pytest.mark.parametrize("package", ["service", "models"])
def test_modules_import_one_another_in_no_cycle(package):
    assert not _cycle(_modules(package))
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


#: The modules that may touch the application's state (``app.state``): the app that
#: fills it, the CLI above it, and the routes' dependencies, where a request meets it.
APP_STATE_READERS = ("service.app", "service.cli", "service.routes.deps")


def _app_state_lines(source: str) -> list[int]:
    """The lines of ``source`` that touch ``app.state`` (``request.app.state``,
    ``app.state``, ``self.app.state``, ...)."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr == "state"
        and (
            (isinstance(node.value, ast.Attribute) and node.value.attr == "app")
            or (isinstance(node.value, ast.Name) and node.value.id == "app")
        )
    )


def test_only_the_routes_dependencies_read_the_app_state():
    """A route (and anything below the routes) is handed the app's parts by
    ``service/routes/deps.py``; caches a route keeps per app come from its ``app_owned``."""
    touching = {}
    for path in (ROOT / "service").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if any(module == name or module.startswith(name + ".") for name in APP_STATE_READERS):
            continue
        lines = _app_state_lines(path.read_text())
        if lines:
            touching[module] = lines
    assert not touching, f"app.state outside service/routes/deps.py: {touching}"


def test_the_app_state_check_sees_a_read():
    source = (
        "def f(request, app, store):\n"
        "    a = request.app.state.store\n"
        "    app.state.cache = 1\n"
        "    b = request.state.caller\n"  # the request's own state: fine
        "    c = getattr(request.app.state, 'x', None)\n"
    )
    assert _app_state_lines(source) == [2, 3, 5]
