"""The rules' core imports no Scrapy, Kafka or Redis: only the Redis store does."""

from __future__ import annotations

import subprocess
import sys

CORE = [
    "crawler.rules",
    "crawler.rules.rewrite",
    "crawler.rules.policy",
    "crawler.rules.learning",
    "crawler.rules.book",
    "crawler.rules.counterparts",
    "crawler.rules.store",
    "crawler.rules.shared",
    "crawler.coverage",
]
FORBIDDEN = ("redis", "scrapy", "twisted", "kafka", "confluent_kafka")


def imported_top_levels(modules: list[str]) -> set[str]:
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_the_core_imports_no_broker_store_or_crawler_framework() -> None:
    assert imported_top_levels(CORE) & set(FORBIDDEN) == set()


def test_the_redis_store_is_the_adapter() -> None:
    assert "redis" in imported_top_levels(["crawler.rules.redis_store"])
