"""The planted test site: its families really are near-duplicates for the engine (k=3), its
different pages really are not, and its manifest agrees with its link graph."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

import pytest

from crawler.extract import extract
from dedup_worker.contract.messages import Page, Verdict
from dedup_worker.core.engine import EngineSettings
from dedup_worker.core.simhash import Document, Fingerprinter, hamming
from dedup_worker.worker.config import load_config
from dedup_worker.worker.main import build_engine
from dedup_worker.worker.metrics import WorkerMetrics
from neardup.demo.manifest import manifest
from neardup.demo.planted import build_site
from neardup.demo.render import render
from neardup.demo.server import ADDRESSES, SiteServer

K = 3
#: Different pages must be far apart, not just beyond k: a margin against tokenizer changes.
MIN_DISTANCE_OF_DIFFERENT_PAGES = 8


@pytest.fixture(scope="module")
def server() -> SiteServer:
    server = SiteServer(build_site())
    server.base = {host: f"http://{ip}:8000" for host, ip in ADDRESSES.items()}  # not served
    return server


@pytest.fixture(scope="module")
def pages(server: SiteServer) -> dict[str, Page]:
    """Every HTML page of the site as the spider would publish it, by canonical URL."""
    result = {}
    for (host, path), spec in server.site.pages.items():
        if spec.raw is not None or spec.redirect_to is not None:
            continue
        url = server.url(host, path)
        ex = extract(render(spec, server.base), url)
        result[url] = Page(
            url=url,
            host=ADDRESSES[host],
            fetched_at=0.0,
            text=ex.text,
            title=ex.title,
            outlinks=ex.outlinks,
        )
    return result


def fingerprint(page: Page) -> int:
    """The fingerprint the engine (and so the worker) computes for this page by default."""
    features = EngineSettings().features
    fps = Fingerprinter(features).fingerprint_many([Document(page.text, page.title)])
    return int(fps[0])


def test_every_family_is_within_k(server: SiteServer, pages: dict[str, Page]) -> None:
    distances = {
        dup["kind"]: hamming(fingerprint(pages[dup["url"]]), fingerprint(pages[dup["original"]]))
        for dup in manifest(server)["duplicates"]
    }
    assert {kind: d for kind, d in distances.items() if d > K} == {}


def test_different_pages_are_far_apart(server: SiteServer, pages: dict[str, Page]) -> None:
    truth = manifest(server)
    different = sorted(set(truth["unique"]) | set(truth["only_via_duplicates"]))
    fps = {url: fingerprint(pages[url]) for url in different}
    close = [
        (a, b, hamming(fps[a], fps[b]))
        for a, b in combinations(different, 2)
        if hamming(fps[a], fps[b]) < MIN_DISTANCE_OF_DIFFERENT_PAGES
    ]
    assert close == []


def test_the_engine_finds_exactly_the_planted_duplicates(
    server: SiteServer, pages: dict[str, Page]
) -> None:
    truth = manifest(server)
    dups = {d["url"]: d for d in truth["duplicates"]}
    order = [*truth["unique"], *dups]  # originals first, as a crawl fetches them
    batch = [replace(pages[url], fetched_at=1000.0 + i) for i, url in enumerate(order)]
    engine = build_engine(load_config([], {}), WorkerMetrics())  # as dedup-worker builds it
    decisions = {d.url: d for d in engine.process(batch)}
    for url in truth["unique"]:
        assert decisions[url].verdict is Verdict.UNIQUE, url
    for url, dup in dups.items():
        decision = decisions[url]
        assert (decision.verdict.value, decision.duplicate_of) == (dup["verdict"], dup["original"])


def test_manifest_is_consistent(server: SiteServer) -> None:
    truth = manifest(server)
    unique, only = set(truth["unique"]), set(truth["only_via_duplicates"])
    dup_urls = {d["url"] for d in truth["duplicates"]}
    assert not unique & only and not unique & dup_urls and not only & dup_urls
    assert {d["original"] for d in truth["duplicates"]} <= unique
    assert len(truth["duplicates"]) == 7 and len(only) == 8 and len(unique) >= 30
    assert not set(truth["disallowed"]) & unique
    assert {r["url"] for r in truth["redirects"]} <= unique
