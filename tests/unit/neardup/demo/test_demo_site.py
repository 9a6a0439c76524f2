"""The demo's site and its scoring: the truth is exact (the construction's groups are exactly
the J >= 0.9 relation of the rendered pages), the score attributes each copy to its kind under
earliest-wins, and an address that cannot be bound is a clear error that leaves nothing up."""

from __future__ import annotations

import socket
from collections import Counter

import pytest

from dedup_worker.contract.messages import Decision, Verdict
from neardup.cli import main
from neardup.demo.planted import build_site
from neardup.demo.run import demo_environment
from neardup.demo.score import score, score_lines
from neardup.demo.server import ADDRESSES, SiteAddressError
from neardup.demo.site import KINDS, DemoSite, DemoTruth, demo_truth
from neardup.demo.subtrees import build_subtree_site
from neardup.demo.truth import clique_partners

BASE = {host: f"http://{ip}:8000" for host, ip in ADDRESSES.items()}  # not served
#: Copies per kind, as the two sites' docstrings describe them.
COPIES = {
    "mirror-host": 1,
    "mirror-prefix": 60,
    "print": 41,
    "session": 41,
    "sort": 40,
    "tracking": 2,
    "timestamp": 1,
    "release": 13,
    "exact": 5,
}


@pytest.fixture(scope="module")
def truth() -> DemoTruth:
    return demo_truth(build_site(), build_subtree_site(), BASE)


def test_the_groups_are_exactly_the_resemblance_of_the_rendered_pages(truth: DemoTruth) -> None:
    pairs = [(copy, group.original) for group in truth.groups for copy, _ in group.copies]
    assert dict(clique_partners(pairs)) == dict(truth.partners)


def test_a_crawl_of_every_link_reaches_every_copy_and_no_forbidden_page(truth: DemoTruth) -> None:
    pages = set(truth.pages)
    assert len(truth.pages) == len(pages) == 517
    assert all(member in pages for group in truth.groups for member in group.members)
    assert truth.traps <= pages and len(truth.traps) == 16
    assert not truth.traps & set(truth.partners), "pagination pages resemble nothing"
    assert BASE["main"] + "/private/ledger" not in pages  # robots.txt
    assert BASE["main"] + "/articles/new-home" in pages  # behind a redirect
    assert Counter(kind for group in truth.groups for _, kind in group.copies) == COPIES
    assert list(COPIES) == list(KINDS)


def _decision(
    url: str, verdict: str = "unique", of: str | None = None, at: float = 0.0
) -> Decision:
    return Decision(
        url=url, host="h", verdict=Verdict(verdict), simhash="0" * 16, priority=0.0,
        follow_outlinks=verdict == "unique", fetched_at=0.0, decided_at=0.0, duplicate_of=of,
    )  # fmt: skip


def _perfect_crawl(truth: DemoTruth) -> dict[str, Decision]:
    """Every page fetched in breadth-first order; each copy a duplicate of its original."""
    original = {copy: g.original for g in truth.groups for copy, _ in g.copies}
    return {
        url: _decision(url, "near_duplicate", original[url]) if url in original else _decision(url)
        for url in truth.pages
    }


def test_a_crawl_of_every_link_that_finds_every_copy(truth: DemoTruth) -> None:
    result = score(truth, list(truth.pages), _perfect_crawl(truth))
    assert (result.full_fetches, result.full_duplicates) == (517, 204)
    assert (result.fetched, result.saved, result.found, result.coverage) == (517, 0, 204, 1.0)
    assert {k.kind: (k.copies, k.found) for k in result.kinds} == {
        kind: (n, n) for kind, n in COPIES.items()
    }
    assert result.wrong == () and result.traps_suppressed == () and result.traps_fetched == 16


def test_a_copy_kept_first_hands_its_kind_to_the_original(truth: DemoTruth) -> None:
    group = next(g for g in truth.groups if len(g.copies) == 3)  # a catalog item and 3 variants
    (printed, kind), (sorted_, _), (session, _) = group.copies
    decisions = _perfect_crawl(truth)
    decisions[printed] = _decision(printed)  # fetched first: the keeper
    decisions[group.original] = _decision(group.original, "near_duplicate", printed)
    decisions[session] = _decision(session)  # missed
    result = score(truth, list(truth.pages), decisions)
    kinds = {k.kind: k for k in result.kinds}
    assert (kinds[kind].found, kinds[kind].missed) == (COPIES[kind], 0)
    assert (kinds["session"].found, kinds["session"].missed) == (COPIES["session"] - 1, 1)
    assert decisions[sorted_].duplicate_of == group.original and result.wrong == ()


def test_pages_not_fetched_saved_or_lost_and_wrong_suppressions(truth: DemoTruth) -> None:
    docs = BASE["docs"]
    v1, v2 = docs + "/release/1.0/", docs + "/release/2.0/"
    behind_v2 = {u for u in truth.pages if u.startswith(v2) and u != v2}
    trap = sorted(truth.traps)[0]
    decisions = {u: d for u, d in _perfect_crawl(truth).items() if u not in behind_v2}
    decisions[trap] = _decision(trap, "near_duplicate", docs + "/news/")
    log = [u for u in truth.pages if u not in behind_v2]
    result = score(truth, log, decisions)
    unchanged = {u for u in behind_v2 if u in truth.partners}
    assert result.saved == len(behind_v2) == 48 and result.duplicates_not_fetched == 12
    assert set(result.lost) == behind_v2 - unchanged
    release = next(k for k in result.kinds if k.kind == "release")
    assert (release.found, release.not_fetched) == (1, 12) and v1 in truth.partners[v2]
    assert result.traps_suppressed == (trap,) and result.wrong == (trap,)
    lines = "\n".join(score_lines(result))
    assert "48 fetches saved" in lines and "unique pages never fetched: 36" in lines
    assert "16 of 16 fetched, 1 suppressed: " + trap in lines


def test_an_address_that_cannot_be_bound_is_named_and_nothing_stays_up() -> None:
    unusable = {**ADDRESSES, "docs": "192.0.2.1"}  # TEST-NET-1: never a local address
    site = DemoSite(unusable)
    with pytest.raises(SiteAddressError, match=r"'docs' on 192\.0\.2\.1: .*ifconfig lo0 alias"):
        site.start()
    planted_server = site.servers[0]
    assert planted_server.base, "the planted site was up before the docs site failed"
    port = int(planted_server.base["main"].rsplit(":", 1)[1])
    with socket.socket() as probe:  # stopped again: its port is free
        probe.bind((ADDRESSES["main"], port))


def test_the_demo_environment_forgets_neardup_settings_and_bypasses_proxies() -> None:
    env = demo_environment(
        {"NEARDUP_KAFKA_BOOTSTRAP": "far:9092", "no_proxy": "corp.example", "HOME": "/h"},
        ("127.0.0.2", "127.0.0.5"),
    )
    assert "NEARDUP_KAFKA_BOOTSTRAP" not in env and env["HOME"] == "/h"
    assert env["no_proxy"].split(",")[0] == "corp.example"
    for name in ("no_proxy", "NO_PROXY"):
        assert {"127.0.0.1", "127.0.0.2", "127.0.0.5"} <= set(env[name].split(","))


def test_demo_refuses_no_workers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--workers", "0"]) == 2
    assert "--workers must be >= 1" in capsys.readouterr().err


def test_demo_refuses_no_crawlers_or_a_budget_smaller_than_the_crawlers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--crawlers", "0"]) == 2
    assert "--crawlers must be >= 1" in capsys.readouterr().err
    assert main(["demo", "--crawlers", "3", "--max-pages", "2"]) == 2
    assert "give each at least one page" in capsys.readouterr().err


def test_demo_refuses_a_budget_below_one_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--max-pages", "0"]) == 2
    assert "--max-pages must be >= 1" in capsys.readouterr().err
