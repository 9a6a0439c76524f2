"""Benchmark the URL rules: prediction per outlink, and learning per decision.

Run from the repository root (with the package installed, e.g. ``pip install -e .``)::

    python benchmarks/bench_rules.py [--origins 200] [--rules 1000] [--outlinks 200000]
                                     [--decisions 3000] [--cluster]

**Lookup** (``RuleBook.predict``, what the crawler calls per outlink, in process): a book of
``--rules`` active rules (host aliases, path prefixes, parameter rules) spread over ``--origins``
origins, asked about ``--outlinks`` canonical URLs: 70% on origins without rules, 20% on
origins with rules that do not match, 10% that a rule maps (for those, ``explore`` too). Also
``applicable`` (per decision, for checks) and a refresh of the local book from the store.

**Update** (``SharedRules.learn``: derive rules from a duplicate pair, list the applicable rules,
record the checks in the store in one atomic call): ``--decisions`` decisions, a third of them
duplicates, on the in-memory store and on a real redis-server (or a 3-node Redis Cluster with
``--cluster``) that the script starts on a loopback port; for Redis also the memory used per
recorded observation (INFO used_memory growth).

MaybeDont (the Scrapy middleware this is compared with) reports 1-5 ms per update and < 1 ms
per prediction, in one process.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from crawler.rules.book import Prediction, RuleBook
from crawler.rules.policy import State
from crawler.rules.redis_store import RedisRuleStore
from crawler.rules.rewrite import ParamRule, PathRewrite, Rule
from crawler.rules.shared import SharedRules
from crawler.rules.store import MemoryRuleStore, RuleStore
from dedup_worker.adapters.redis_client import Client
from neardup.stack import RedisCluster, RedisServer

_WORDS = ["docs", "guide", "api", "news", "shop", "item", "blog", "v1", "v2", "reference"]


def origin(i: int) -> str:
    return f"https://site{i}.example"


def make_rules(rng: random.Random, origins: int, count: int) -> list[Rule]:
    rules: list[Rule] = []
    for n in range(count):
        src, dst = origin(rng.randrange(origins)), origin(rng.randrange(origins))
        kind = n % 4
        if kind == 0:
            rules.append(PathRewrite(src, "", dst, ""))
        elif kind == 1:
            rules.append(PathRewrite(src, f"/{rng.choice(_WORDS)}/{n}", dst, f"/{n}"))
        elif kind == 2:
            rules.append(ParamRule(src, f"sid{n}"))
        else:
            rules.append(ParamRule(src, f"sort{n}", "desc", "asc"))
    return rules


def make_outlinks(rng: random.Random, rules: list[Rule], origins: int, n: int) -> list[str]:
    ruled = sorted({r.src_origin if isinstance(r, PathRewrite) else r.origin for r in rules})
    free = [origin(i) for i in range(origins, origins * 4)]
    links = []
    for i in range(n):
        path = "/" + "/".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4)))
        share = i % 10
        if share < 7:
            links.append(f"{rng.choice(free)}{path}?page={i % 7}")
        elif share < 9:
            links.append(f"{rng.choice(ruled)}{path}/x{i}?q={i % 13}")
        else:
            links.append(matching_link(rng.choice(rules), i))
    return links


def matching_link(rule: Rule, i: int) -> str:
    if isinstance(rule, PathRewrite):
        return f"{rule.src_origin}{rule.src_prefix}/page-{i}?a=1"
    value = rule.value if rule.value is not None else f"v{i}"
    return f"{rule.origin}/page-{i}?a=1&{rule.name}={value}"


def predict_all(book: RuleBook, urls: list[str]) -> list[Prediction | None]:
    return [book.predict(u) for u in urls]


def per_call_us(fn: Callable[[], object], calls: int, repeats: int = 5) -> float:
    """Best of ``repeats`` runs (the least disturbed by other processes), us per call."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6


def bench_lookup(args: argparse.Namespace) -> None:
    rng = random.Random(13)
    rules = make_rules(rng, args.origins, args.rules)
    book = RuleBook()
    for rule in rules:
        book.apply(rule, State.ACTIVE, checks=100)
    links = make_outlinks(rng, rules, args.origins, args.outlinks)
    matched = [p for link in links if (p := book.predict(link)) is not None]
    print(f"lookup: {len(rules)} active rules on {args.origins} origins, {len(links)} outlinks")
    groups = {
        "all outlinks": links,
        "origin without rules": [u for i, u in enumerate(links) if i % 10 < 7],
        "origin with rules, no match": [u for i, u in enumerate(links) if 7 <= i % 10 < 9],
        "a rule maps it": [u for i, u in enumerate(links) if i % 10 == 9],
    }
    for name, group in groups.items():
        us = per_call_us(functools.partial(predict_all, book, group), len(group))
        print(f"  predict, {name:<28} {us:7.2f} us/lookup")
    us = per_call_us(lambda: [book.explore(p) for p in matched], len(matched))
    print(f"  explore (per prediction)              {us:7.2f} us")
    sample = links[: len(links) // 10]
    us = per_call_us(lambda: [book.applicable(u) for u in sample], len(sample))
    print(f"  applicable (per decision)             {us:7.2f} us")


def decisions(rng: random.Random, n: int) -> Iterator[tuple[str, str | None]]:
    """(url, duplicate_of): a mirror, session ids and print views across a few sites."""
    for i in range(n):
        site = origin(i % 7)
        page = f"/{rng.choice(_WORDS)}/p{i}"
        kind = i % 3
        if kind == 0:
            yield f"https://mirror{i % 7}.example/pub{page}", f"{site}{page}"
        elif kind == 1:
            yield f"{site}{page}?sid={rng.randrange(10**6)}", f"{site}{page}"
        else:
            yield f"{site}{page}?x={i}", None


def bench_update(
    name: str, store: RuleStore, n: int, memory: Callable[[], int] | None = None
) -> None:
    before = memory() if memory else 0
    rules = SharedRules(store)
    rng = random.Random(7)
    keepers: dict[str, str] = {}
    times, observed = [], 0
    for url, duplicate_of in decisions(rng, n):
        if duplicate_of is not None:
            keepers.setdefault(duplicate_of, duplicate_of)
        keepers[url] = keepers.get(duplicate_of or url, url)
        start = time.perf_counter()
        statuses = rules.learn(url, duplicate_of, keepers.get)
        times.append(time.perf_counter() - start)
        observed += len(statuses)
    start = time.perf_counter()
    rules.refresh()
    refresh_ms = (time.perf_counter() - start) * 1e3
    active = len(rules.book.keys(State.ACTIVE))
    print(
        f"  {name:<14} {statistics.mean(times) * 1e6:7.1f} us/decision (mean), "
        f"p50 {statistics.median(times) * 1e6:6.1f}, "
        f"p99 {sorted(times)[int(0.99 * len(times))] * 1e6:7.1f}; "
        f"{sum(times) / max(observed, 1) * 1e6:6.1f} us/observation; "
        f"{len(rules.book)} rules ({active} active), full refresh {refresh_ms:.1f} ms"
    )
    if memory:
        grown = memory() - before
        print(f"  {'':<14} used_memory {grown / max(observed, 1):.0f} B/observation")


@contextmanager
def redis_client(cluster: bool) -> Iterator[tuple[Client, Callable[[], int]]]:
    """A client, and the servers' total INFO used_memory."""
    if cluster:
        with RedisCluster() as servers:
            nodes = [node.client() for node in servers.nodes]
            yield servers.client(), lambda: sum(c.info("memory")["used_memory"] for c in nodes)
    else:
        with RedisServer() as server:
            client = server.client()
            yield client, lambda: int(client.info("memory")["used_memory"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--origins", type=int, default=200)
    parser.add_argument("--rules", type=int, default=1000)
    parser.add_argument("--outlinks", type=int, default=200_000)
    parser.add_argument("--decisions", type=int, default=3000)
    parser.add_argument("--cluster", action="store_true", help="a 3-node Redis Cluster")
    args = parser.parse_args()
    bench_lookup(args)
    print(f"update: SharedRules.learn over {args.decisions} decisions (2/3 duplicates)")
    bench_update("memory", MemoryRuleStore(), args.decisions)
    with redis_client(args.cluster) as (client, memory):
        store = RedisRuleStore(client, f"bench-{uuid.uuid4().hex[:8]}")
        name = "redis cluster" if args.cluster else "redis"
        bench_update(name, store, args.decisions, memory)


if __name__ == "__main__":
    main()
