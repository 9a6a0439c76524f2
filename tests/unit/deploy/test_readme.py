"""The README's configuration reference names every setting the code reads."""

from __future__ import annotations

import re

from crawler.config import ENV_SETTINGS
from dedup_worker.adapters.kafka import SECURITY_SETTINGS as KAFKA_SECURITY
from dedup_worker.adapters.redis_client import SECURITY_SETTINGS as REDIS_SECURITY
from dedup_worker.worker.config_options import OPTIONS
from neardup.cli import build_parser
from tests.support.paths import REPO

README_PATH = REPO / "README.md"
README = README_PATH.read_text()
CRAWLER_SOURCES = REPO / "crawler"


def test_every_worker_option_is_documented() -> None:
    missing = [o.env for o in OPTIONS if f"`{o.env}`" not in README or o.flag not in README]
    assert missing == []


def test_every_crawler_setting_is_documented() -> None:
    read = set(ENV_SETTINGS)
    for source in CRAWLER_SOURCES.glob("*.py"):
        read |= set(re.findall(r'"(NEARDUP_[A-Z_]+)"', source.read_text()))
    assert sorted(name for name in read if name not in README) == []


def test_every_security_setting_is_documented_and_in_the_compose_example() -> None:
    compose = (README_PATH.parent / "docker" / "compose.yaml").read_text()
    names = [*KAFKA_SECURITY, *REDIS_SECURITY]
    assert [name for name in names if name not in README] == []
    shown = {"NEARDUP_KAFKA_SASL_PASSWORD", "NEARDUP_REDIS_PASSWORD", "NEARDUP_KAFKA_TLS_CA_FILE"}
    assert [name for name in shown if f"# {name}:" not in compose] == []


def test_every_subcommand_is_documented() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert sorted(c for c in commands if f"neardup {c}" not in README) == []
