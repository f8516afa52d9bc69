"""The package layout and dependency direction promised in docs/architecture.md."""

import ast
import pathlib

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
