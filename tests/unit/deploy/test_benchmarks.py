"""The benchmarks use the project only through its public names, so a refactoring that keeps
the public surface keeps them running (mypy checks the rest: they are in its files)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import REPO

ROOT = REPO
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))


def private(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in name.split("."))


def private_uses(path: Path) -> list[str]:
    """Imports of private modules or names, and private attributes of imported modules."""
    tree = ast.parse(path.read_text(), str(path))
    modules: set[str] = set()  # local names bound to imported modules
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules.add(alias.asname or alias.name.split(".")[0])
                if private(alias.name):
                    found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                modules.add(alias.asname or alias.name)
                if private(node.module) or private(alias.name):
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and private(node.attr)
        ):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_there_are_benchmarks() -> None:
    assert len(BENCHMARKS) >= 5


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_a_benchmark_uses_no_private_name(path: Path) -> None:
    assert private_uses(path) == []


def test_the_check_finds_private_uses(tmp_path: Path) -> None:
    script = tmp_path / "bench_x.py"
    script.write_text(
        "from crawler._lxml_walk import walk_html\n"
        "from crawler import extract_bs4\n"
        "from crawler.urls import _canonicalize_cached\n"
        "extract_bs4._parse('')\n"
    )
    assert len(private_uses(script)) == 3
