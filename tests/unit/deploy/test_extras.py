"""What each install pulls in: the base install is the worker's, the rest comes in extras, and
the Docker targets and the README's install command use them as documented."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from functools import cache
from importlib.metadata import packages_distributions
from typing import Any

import pytest

from neardup.extras import EXTRAS
from tests.support.paths import REPO

ROOT = REPO
FIRST_PARTY = {"dedup_worker", "crawler", "neardup"}
RUNTIME_EXTRAS = ("crawler", "stack", "report")


@cache
def project() -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return data


def normalised(requirement: str) -> str:
    """The distribution a requirement names, PEP 503-normalised (``Scrapy>=2`` -> ``scrapy``)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def requirements(extra: str | None) -> set[str]:
    """The distributions of the base install (None) or of one extra, other extras expanded."""
    data = project()
    listed = data["dependencies"] if extra is None else data["optional-dependencies"][extra]
    out: set[str] = set()
    for requirement in listed:
        nested = re.fullmatch(r"neardup\[([a-z,]+)\]", requirement)
        if nested:
            for name in nested.group(1).split(","):
                out |= requirements(name)
        else:
            out.add(normalised(requirement))
    return out


def distribution_of(module: str) -> str:
    found = packages_distributions().get(module)
    assert found, f"{module} is imported but no installed distribution provides it"
    return normalised(found[0])


def third_party_imports(package: str) -> dict[str, set[str]]:
    """Top-level modules outside the standard library and this project that ``package``
    imports anywhere (lazily or not), each with the files that import it."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_worker_imports_only_what_the_base_install_provides() -> None:
    base = requirements(None)
    outside = {
        module: sorted(files)
        for module, files in third_party_imports("dedup_worker").items()
        if distribution_of(module) not in base
    }
    assert outside == {}


@pytest.mark.parametrize("extra", RUNTIME_EXTRAS)
def test_optional_dependencies_stay_out_of_the_base_install(extra: str) -> None:
    assert requirements(extra) and not requirements(extra) & requirements(None)
    # The modules the code checks for (neardup.extras) are the ones this extra installs.
    assert {distribution_of(module) for module in EXTRAS[extra]} == requirements(extra)


def test_the_readme_install_command_installs_everything() -> None:
    assert "pip install -e '.[dev]'" in (ROOT / "README.md").read_text()
    dev = requirements("dev")
    for extra in (*RUNTIME_EXTRAS, "test"):
        assert requirements(extra) <= dev, f"[dev] lacks [{extra}]"


def dockerfile_installs() -> dict[str, list[str]]:
    """Per build stage, the package specs its ``pip install`` lines install."""
    installs: dict[str, list[str]] = {}
    stage = ""
    for line in (ROOT / "docker" / "Dockerfile").read_text().splitlines():
        header = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.I)
        if header:
            stage = header.group(1)
        for spec in re.findall(r"pip install\s+'?(\.[^\s'&]*)'?", line):
            installs.setdefault(stage, []).append(spec)
    return installs


def test_the_worker_image_installs_the_base_only_and_the_crawler_its_extra() -> None:
    installs = dockerfile_installs()
    assert installs.get("worker") == ["."]
    assert installs.get("crawler") == [".[crawler]"]
    assert "base" not in installs  # both targets build on it: it must install nothing
    for specs in installs.values():
        for spec in specs:
            extras = re.findall(r"[a-z]+", spec.partition("[")[2])
            assert set(extras) <= set(project()["optional-dependencies"]), spec
