"""Fixtures and helpers of the rule store contract tests (imported by the test module).

``make_rules(policy=..., crawl_id=...)`` builds a ``RuleStore`` of the backend under test: the
in-memory reference, ``RedisRuleStore`` on the session redis-server, or on the session 3-node
Redis Cluster (clients from ``tests/contract/conftest.py``). Each call without ``crawl_id``
gets a new crawl, so tests (and hypothesis examples) never see each other's rules; the memory
store of one crawl id is shared like Redis is, so "two processes" tests mean the same
everywhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from crawler.rules.learning import Observation
from crawler.rules.policy import DEFAULT_POLICY, RulePolicy
from crawler.rules.redis_store import RedisRuleStore
from crawler.rules.rewrite import ParamRule, PathRewrite, Rule
from crawler.rules.store import MemoryRuleStore, RuleStore

RulesFactory = Callable[..., RuleStore]

BACKENDS: list[Any] = [
    "memory",
    pytest.param("redis", marks=pytest.mark.integration),
    pytest.param("cluster", marks=pytest.mark.integration),
]
REDIS_BACKENDS: list[Any] = BACKENDS[1:]

M, D = "http://mirror.example", "http://docs.example:8080"
ALIAS = PathRewrite(M, "", D, "")
SESSION = ParamRule(D, "sid")


def new_crawl_id() -> str:
    return f"c{uuid.uuid4().hex[:12]}"


@pytest.fixture(name="rules_client")
def rules_client_fixture(request: pytest.FixtureRequest, backend: str) -> Any:
    if backend == "redis":
        return request.getfixturevalue("shared_redis_client")
    if backend == "cluster":
        return request.getfixturevalue("shared_cluster_client")
    return None


@pytest.fixture(name="make_rules")
def make_rules_fixture(backend: str, rules_client: Any) -> RulesFactory:
    memory: dict[str, MemoryRuleStore] = {}

    def build(policy: RulePolicy = DEFAULT_POLICY, crawl_id: str | None = None) -> RuleStore:
        crawl = crawl_id or new_crawl_id()
        if backend == "memory":
            return memory.setdefault(crawl, MemoryRuleStore(policy))
        return RedisRuleStore(rules_client, crawl, policy)

    return build


def check(rule: Rule, n: int, success: bool = True, value: str = "v") -> Observation:
    """The n-th check of ``rule``: a page on path /p<n> (value ``value`` of a parameter)."""
    if isinstance(rule, ParamRule):
        url = f"{rule.origin}/p{n}?{rule.name}={value}"
        return Observation(rule, url, f"{rule.origin}/p{n}", success)
    return Observation(rule, f"{rule.src_origin}/p{n}", f"{rule.dst_origin}/p{n}", success)


def clean_checks(rule: Rule, n: int, start: int = 0) -> list[Observation]:
    return [check(rule, start + i, value=f"v{start + i}") for i in range(n)]
