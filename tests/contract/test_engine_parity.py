"""The same decisions on every backend: memory, one real redis-server, the real 3-node cluster.

Real pages (the labelled quality fixture) go through ``DedupEngine`` built exactly as
``dedup-worker`` builds it from the default configuration (planner design with its replicas,
search radius beyond the tables' k, capped single-word fingerprints, the sketch), in batches.
The index rule depends on the design and radius only, and verification on the stored sketch,
so every backend must publish the same verdict and original for every page.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import pytest

from dedup_worker.contract.messages import Page
from dedup_worker.core.engine import DedupEngine
from dedup_worker.worker.config import load_config
from dedup_worker.worker.main import build_backends, engine_settings
from neardup.stack import RedisCluster, RedisServer
from tests.support.paths import FIXTURES

FIXTURE = FIXTURES / "quality" / "corpus.jsonl"
Final = dict[tuple[str, float], tuple[str, str | None]]


def _pages() -> list[Page]:
    rows = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    return [
        Page(
            url=f"https://{row['id'].split(':', 1)[0]}.example/{i}",
            host=f"{row['id'].split(':', 1)[0]}.example",
            fetched_at=1000.0 + i,
            text=row["text"],
            title=row["title"],
        )
        for i, row in enumerate(rows)
    ]


def _decide(env: dict[str, str]) -> Final:
    config = load_config([], {**env, "NEARDUP_INDEX_NAMESPACE": f"p{uuid.uuid4().hex[:10]}"})
    settings = engine_settings(config)
    index, docs = build_backends(config, settings.version_tag)
    engine = DedupEngine(index, docs, settings)
    final: Final = {}
    first = _pages()
    # Then a recrawl of every page with the same text: unchanged revisits, each keeping its
    # first fetch's standing (a duplicate stays one, of the same original).
    pages = first + [replace(p, fetched_at=p.fetched_at + 100_000.0) for p in first]
    for start in range(0, len(pages), 97):
        for decision in engine.process(pages[start : start + 97]):
            key = (decision.url, decision.fetched_at)
            if decision.corrects or key not in final:
                final[key] = (decision.verdict.value, decision.duplicate_of)
    return final


@pytest.fixture(scope="module")
def in_memory() -> Final:
    return _decide({})


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_redis_backends_decide_like_memory(
    backend: str, in_memory: Final, request: pytest.FixtureRequest
) -> None:
    env: dict[str, Any]
    if backend == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        env = {"NEARDUP_REDIS_URL": server.url}
    else:
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        env = {"NEARDUP_REDIS_URL": cluster.url, "NEARDUP_REDIS_CLUSTER": "true"}
    decided = _decide(env)
    suppressed = sum(verdict.endswith("duplicate") for verdict, _ in in_memory.values())
    assert suppressed > 100  # the fixture's families are found at all
    for (url, at), (verdict, original) in in_memory.items():
        if at < 100_000.0:  # the first crawl's page, against its recrawl
            again = in_memory[(url, at + 100_000.0)]
            assert again == ("unchanged", original if verdict.endswith("duplicate") else None)
    differ = {
        key: (in_memory[key], decided.get(key))
        for key in in_memory
        if decided.get(key) != in_memory[key]
    }
    assert differ == {}
