"""What each Docker target runs imports with only what that target installs (no Docker engine
here: the extras a target lacks are made unimportable in a fresh interpreter, as in the image).
``test_docker_files`` checks the files themselves, ``test_extras`` the pip lines."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
import yaml

from neardup.extras import EXTRAS
from tests.support.paths import REPO

ROOT = REPO
#: The extras each target installs on top of the base install (the Dockerfile's pip lines).
TARGET_EXTRAS: dict[str, tuple[str, ...]] = {"worker": (), "crawler": ("crawler",)}
#: The program each target runs: every module of its package, and the command it starts
#: (`neardup crawl` on the deployment's Kafka and Redis: no embedded servers, no report).
TARGET_MODULES = {
    "worker": ["dedup_worker"],
    "crawler": ["crawler", "neardup.cli", "neardup.crawl_run", "neardup.commands.crawl"],
}

#: argv: blocked top-level modules, modules to import (packages with all their modules).
IMPORT_CHECK = """
import importlib, pkgutil, sys

# None in sys.modules: `import name` raises ModuleNotFoundError and find_spec says None, as
# when the distribution is not installed.
for name in sys.argv[1].split(","):
    sys.modules[name] = None
for name in sys.argv[2].split(","):
    module = importlib.import_module(name)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), name + "."):
        importlib.import_module(info.name)
print("ok")
"""


def import_check(blocked: set[str], modules: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK, ",".join(sorted(blocked)), ",".join(modules)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def dockerfile_stage(name: str) -> str:
    text = (ROOT / "docker" / "Dockerfile").read_text()
    stages = re.split(r"^FROM\s+\S+\s+AS\s+(\S+)\s*$", text, flags=re.MULTILINE | re.I)
    return dict(zip(stages[1::2], stages[2::2], strict=True))[name]


@pytest.mark.parametrize("target", sorted(TARGET_EXTRAS))
def test_a_target_imports_with_only_its_extras(target: str) -> None:
    installed = " ".join(re.findall(r"pip install\s+(\S+)", dockerfile_stage(target)))
    for extra in EXTRAS:
        assert (f"[{extra}]" in installed) == (extra in TARGET_EXTRAS[target]), installed
    blocked = {
        module
        for extra, modules in EXTRAS.items()
        if extra not in TARGET_EXTRAS[target]
        for module in modules
    }
    result = import_check(blocked, TARGET_MODULES[target])
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_the_import_check_fails_when_a_blocked_module_is_needed() -> None:
    result = import_check({"matplotlib"}, ["neardup.report"])
    assert result.returncode != 0 and "neardup[report]" in result.stderr


def test_the_worker_healthcheck_asks_the_metrics_port_compose_sets() -> None:
    stage = dockerfile_stage("worker")
    assert "EXPOSE 9400" in stage and "/metrics" in stage and "NEARDUP_METRICS_PORT" in stage
    services: dict[str, Any] = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    assert services["services"]["worker"]["environment"]["NEARDUP_METRICS_PORT"] == "9400"
