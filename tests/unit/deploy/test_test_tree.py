"""The test tree mirrors the packages, and tests share helpers through ``tests.support`` only."""

from __future__ import annotations

import ast

import pytest

from tests.support.paths import REPO

TESTS = REPO / "tests"
# Test folders that are not a package's: the repository's deploy files, the tools/ scripts,
# the secured deployment (every package at once).
NOT_A_PACKAGE = {"unit/deploy", "unit/tools", "integration/security"}


def _test_folders(layer: str) -> list[str]:
    root = TESTS / layer
    return sorted(
        str(d.relative_to(TESTS))
        for d in root.rglob("*")
        if d.is_dir() and d.name != "__pycache__" and any(d.glob("test_*.py"))
    )


@pytest.mark.parametrize("layer", ["unit", "integration"])
def test_every_test_folder_is_a_package_folder(layer: str) -> None:
    strays = [
        folder
        for folder in _test_folders(layer)
        if folder not in NOT_A_PACKAGE and not (REPO / folder.removeprefix(f"{layer}/")).is_dir()
    ]
    assert not strays, f"test folders that mirror no package: {strays}"


def _imported_modules(path: str) -> set[str]:
    tree = ast.parse((TESTS / path).read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}  # fmt: skip
    names |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    return names


def test_no_helpers_imported_from_conftest_or_by_bare_name() -> None:
    local = {p.stem for p in TESTS.rglob("*.py")} - {"__init__"}
    bad = {
        str(path.relative_to(TESTS)): sorted(
            name
            for name in _imported_modules(str(path.relative_to(TESTS)))
            if name.split(".")[0] in local | {"conftest"}
        )
        for path in TESTS.rglob("*.py")
        if "fixtures" not in path.parts
    }
    bad = {path: names for path, names in bad.items() if names}
    assert not bad, f"import test helpers as tests.support.<name>: {bad}"
