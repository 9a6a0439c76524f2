"""The docker/ files, checked statically (no Docker engine here): they parse, and everything
they reference exists in this repository and this package."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from neardup.cli import build_parser
from tests.support.paths import REPO

ROOT = REPO
DOCKER = ROOT / "docker"


def compose() -> dict[str, Any]:
    data = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def dockerfile_targets(path: Path) -> set[str]:
    return set(re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", path.read_text(), re.MULTILINE | re.I))


def console_scripts() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])


def test_compose_has_the_services_with_health_checks() -> None:
    services = compose()["services"]
    assert {"kafka", "redis", "worker", "crawler", "topics"} <= set(services)
    assert "healthcheck" in services["kafka"] and "healthcheck" in services["redis"]
    # `--scale worker=N` needs a service without a fixed name or published host port.
    assert "container_name" not in services["worker"] and "ports" not in services["worker"]


@pytest.mark.parametrize("service", ["worker", "crawler"])
def test_builds_reference_existing_files_and_targets(service: str) -> None:
    build = compose()["services"][service]["build"]
    context = (DOCKER / build["context"]).resolve()
    dockerfile = context / build["dockerfile"]
    assert context == ROOT and dockerfile.is_file()
    assert build["target"] in dockerfile_targets(dockerfile)


def test_dockerfile_copies_existing_paths_and_runs_installed_commands() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    for line in re.findall(r"^COPY\s+(.+)$", text, re.MULTILINE):
        *sources, _ = shlex.split(line)
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    for entry in re.findall(r"^ENTRYPOINT\s+(\[.*\])$", text, re.MULTILINE):
        command = yaml.safe_load(entry)[0]
        assert command in console_scripts(), f"ENTRYPOINT {command} is not a console script"


def test_partition_count_is_a_setting() -> None:
    text = (DOCKER / "compose.yaml").read_text()
    assert "${NEARDUP_PARTITIONS:-8}" in text
    assert "--partitions ${NEARDUP_PARTITIONS:-8}" in " ".join(text.split())


def test_crawler_command_parses_with_the_real_cli() -> None:
    service = compose()["services"]["crawler"]
    # As docker compose runs it: ${NAME:-default} interpolated, with nothing in the environment.
    command = [re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(part)) for part in service["command"]]
    args = build_parser().parse_args(["crawl", *command])
    assert args.command == "crawl"
    assert args.crawlers == 1 and args.seeds == ["https://example.org/"]
