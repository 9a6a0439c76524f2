"""``neardup demo --site`` on real documentation sites, crawled for real (broker, Redis, workers,
spider): the two numbers a user counts stay within their floors, and every unique page is
fetched, checked here from the pages and the decisions file, not from the demo's own scoring.

The fixture (``tests/fixtures/sites_real/click-docs.tar.xz``, from ``python
tools/build_corpus.py --sites DIR --sources click``): click's documentation in releases 8.1.6
and 8.1.7, built by Sphinx (alabaster) on one host and by docutils in a Read the Docs template
on another, each release under its prefix and 8.1.7 again under ``/latest/``: renderer mirrors
(mostly below J 0.9), a release alias (exact copies), consecutive releases (near copies, a few
changed pages), short contents pages that differ in one word.

The second fixture (``holdout-attrs-jinja.tar.xz``, from ``python tools/build_corpus.py
--sites DIR --holdout --sources attrs,jinja2``) is of the held-out sites (README, "Held-out
sites"): attrs 24.2.0 / 24.3.0 (Markdown) on three hosts and Jinja 3.1.4 / 3.1.5 on two, by
generators the development sites do not use either. Nothing in neardup was tuned on them.

The fourth (``holdout2-urllib3-packaging.tar.xz``, from ``python tools/build_corpus.py --sites
DIR --holdout second --sources urllib3,packaging``) is of the second held-out set (README, "A
second held-out set"), built after the first had led to changes of the crawler: urllib3 2.2.3 /
2.3.0 and packaging 24.1 / 24.2, two hosts each (Sphinx's scrolls and classic themes, docutils
and pandoc in site templates): releases that changed many of their pages (12 of urllib3's 39
page pairs alike across the hosts), where a release rule that acts loses unique pages.

The third (``shop.tar.xz``, from ``python tools/build_corpus.py --sites DIR --shop --site-scale
0.25``): two shops of 120 products each, 25-200-word descriptions (windows of man pages) in a
~300-word template on ``shop.light`` and a ~1,050-word one on ``shop.heavy``, with category
lists sorted by price and product links carrying a referrer parameter.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from dedup_worker.contract.messages import decode_decision
from dedup_worker.contract.reading import fold_decisions
from neardup.demo.static import StaticSite
from neardup.evaluation.quality import THRESHOLD, shingle_sets, similar_pairs

pytestmark = pytest.mark.integration

NEARDUP = Path(sys.executable).parent / "neardup"
FIXTURES = Path(__file__).parents[3] / "fixtures" / "sites_real"
FIXTURE = FIXTURES / "click-docs.tar.xz"
HELD_OUT = FIXTURES / "holdout-attrs-jinja.tar.xz"
SHOP = FIXTURES / "shop.tar.xz"
HELD_OUT_SECOND = FIXTURES / "holdout2-urllib3-packaging.tar.xz"
SUPPRESSED = ("near_duplicate", "exact_duplicate")
STATS_FILES = ("crawl-stats.json", "crawl-stats-1.json")  # the spiders of ``--crawlers 2``
#: The spider's stats that say where a page budget went.
_BUDGET_KEYS = re.compile(
    r"finish_reason|budget|fail|refused|cancel|waiting|pages_|errors|ignored|ahead|skipped"
    r"|non_html|retry|response_status_count|requests_sent|outlinks_scheduled"
)


def _unpack(into: Path, fixture: Path = FIXTURE) -> Path:
    with tarfile.open(fixture) as tar:
        tar.extractall(into, filter="data")
    return into


def _crawl(sites: Path, out: Path, *extra: str) -> dict[str, Any]:
    """``neardup demo --site`` for real; its ``summary.json``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    argv = [str(NEARDUP), "demo", "--site", str(sites), "--out", str(out), "--quiet", *extra]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def _texts(root: Path) -> dict[Path, str]:
    from crawler.extract import extract

    return {
        path: extract(path.read_bytes(), "http://site.test/" + path.name).text
        for path in sorted(root.rglob("*.html"))
    }


@pytest.mark.timeout(600)
def test_a_crawl_of_real_documentation_sites_saves_fetches_and_fetches_every_unique_page(
    tmp_path: Path,
) -> None:
    sites = _unpack(tmp_path / "sites")
    out = tmp_path / "demo"
    figures = _crawl(sites, out)
    # A crawl of every link: 146 pages, 90 of them duplicates of a page fetched before.
    # Measured (27 Nov, quiet and loaded): 107-119 fetched, 51-63 duplicates among them, no
    # unique page missed, no wrong suppression. The floors leave room for a slow machine.
    _assert_figures(figures, full=(146, 90), fetched=128, duplicates_fetched=72)
    # The duplicates fetched, in classes by the best rule that could have skipped each: they
    # add up, and the release alias (alike on every pair) is among them while it is learned.
    by_rule = figures["duplicates_fetched_by_rule"]
    classes = ("rule_holds", "rule_nearly", "no_rule_holds", "no_rule", "fetched_again")
    assert sum(by_rule[name] for name in classes) == figures["duplicates_fetched"], by_rule
    assert by_rule["rule_holds"] > 0 and by_rule["rules_that_hold"] >= 1, by_rule
    # The crawl's rules, scored against the pages: the /latest/ alias of a release is learned
    # and maps every page of the release to a page of the site (24 pairs a direction).
    active = [rule for rule in figures["rules"] if rule["state"] == "active"]
    assert active and all(rule["pairs"] == 24 for rule in active), figures["rules"]
    assert all(rule["alike"] >= 23 for rule in active), figures["rules"]
    assert _suppressed_and_every_content_fetched(sites, out, figures) >= 40  # alias, release


@pytest.mark.timeout(600)
def test_two_crawler_processes_share_the_crawl_and_fetch_no_url_twice(tmp_path: Path) -> None:
    """``--crawlers 2``: two spiders of one crawl, the same seeds. The second finds them claimed
    by the first; before crawler.sharing it closed at once, having fetched nothing. Now it waits,
    hungry, and the first hands it links (crawler.sharing)."""
    sites = _unpack(tmp_path / "sites")
    out = tmp_path / "demo"
    figures = _crawl(sites, out, "--crawlers", "2")
    # Measured (29 Nov, twentieth session), by turns with one crawler: 119 / 135 / 124 / 120 /
    # 119 / 127 / 136 fetched (63-80 duplicates) with two, 118-120 (62-64) with one. Some of
    # a crawler's knowledge is its own (what waits in its queue, to fetch ahead or pace), so
    # two fetch more copies of this small site. The ceilings stay under a crawl of every link
    # (146, 90): what this test holds is the sharing, not the savings (README, "Scaling").
    _assert_figures(figures, full=(146, 90), fetched=145, duplicates_fetched=89)
    assert figures["duplicates_fetched_by_rule"]["fetched_again"] == 0, figures  # no URL twice
    each = [json.loads((out / "state" / name).read_text()) for name in STATS_FILES]
    # Both spiders work: each fetched pages or requested links handed over (on a fast host the
    # first spider can finish the site while the second takes only dead links: 2 404s).
    worked = [s.get("dedup/pages_fetched", 0) + s.get("dedup/requests_taken_over", 0) for s in each]
    assert all(worked), each
    handed = sum(stats.get("dedup/requests_handed_over", 0) for stats in each)
    taken = sum(stats.get("dedup/requests_taken_over", 0) for stats in each)
    assert handed == taken > 0, each  # nothing left in the shared list
    assert _suppressed_and_every_content_fetched(sites, out, figures) >= 40


@pytest.mark.timeout(600)
def test_a_crawl_with_a_budget_stops_at_it_and_is_scored_against_breadth_first(
    tmp_path: Path,
) -> None:
    sites = _unpack(tmp_path / "sites")
    figures = _crawl(sites, tmp_path / "demo", "--max-pages", "50")
    # Shown if it fails: where the budget went.
    stats = json.loads((tmp_path / "demo" / "state" / STATS_FILES[0]).read_text())
    figures = {**figures, "spider": {k: v for k, v in stats.items() if _BUDGET_KEYS.search(k)}}
    shown = json.dumps(figures, sort_keys=True, default=str)  # a string: shown whole
    # 50 released links and the two seeds at most, against the whole site (146 pages, 56
    # distinct contents): 50 pages fetched can miss no fewer than 6. A breadth-first crawl of
    # every link stopped after as many fetches misses 73. Before a release's copies waited for
    # the idle moment (crawler.rules.likely), which unique pages the budget bought depended on
    # which decisions came first: measured (28 Nov) 16 / 16 / 40 / 16 missed quiet, 16 / 70 /
    # 69 with two CPU burners; since (29 Nov), 6 in 9 crawls of 9, 3 of them with burners.
    assert 40 <= figures["fetched"] <= 52 and figures["full_fetches"] == 146, shown
    # The budget counts requests sent, 404s included (README, "Real sites"): the Sphinx host
    # links each release's genindex.html and search.html from every page, and the fixture has
    # neither. When some of those six go out before the budget is spent, their places buy no
    # page (in 2 CI runs of ~10, and in 1 crawl of 3 by hand on 29 Nov: 48 pages fetched, 2
    # requests ignored, 12 missed), and a content not fetched leaves at most its three copies
    # on its host unfetched (8.1.6, 8.1.7 and its /latest/ alias).
    dead = stats.get("dedup/requests_http_error", 0)
    assert figures["fetched"] + dead <= 52, shown  # the budget, 404s included
    bound = 10 + 3 * dead
    assert 0 < figures["unique_missed"] <= bound and figures["coverage"] < 1.0, shown
    assert figures["duplicates_fetched"] <= 4, shown
    assert figures["breadth_first_lost"] >= 60, shown


@pytest.mark.timeout(600)
def test_a_crawl_of_held_out_sites_fetches_every_unique_page(tmp_path: Path) -> None:
    sites = _unpack(tmp_path / "sites", HELD_OUT)
    out = tmp_path / "demo"
    figures = _crawl(sites, out)
    # A crawl of every link: 224 pages, 153 of them duplicates of a page fetched before.
    # Measured (28 Nov, tenth session): 191-196 fetched, 116-124 duplicates among them, no
    # unique page missed, no wrong suppression (five small hosts: few rules get the checks to
    # act). Since the groups answer to their rewrite's rule (fifteenth session) and sample more
    # while it is young, and release notes are fetched (sixteenth): 210-214 fetched, 135-143
    # duplicates in nine crawls of the three versions, still none missed. With release front
    # pages known to differ (seventeenth): 216-218 fetched, 141-147 duplicates in six crawls.
    # The ceilings stay under a crawl of every link, so a crawl that saves nothing fails.
    _assert_figures(figures, full=(224, 153), fetched=222, duplicates_fetched=151)
    assert _suppressed_and_every_content_fetched(sites, out, figures) >= 80  # found: 136-141


@pytest.mark.timeout(600)
def test_a_crawl_of_the_second_held_out_set_fetches_every_unique_page(tmp_path: Path) -> None:
    sites = _unpack(tmp_path / "sites", HELD_OUT_SECOND)
    out = tmp_path / "demo"
    figures = _crawl(sites, out)
    # A crawl of every link: 230 pages, 112 of them duplicates of a page fetched before.
    # Measured (29 Nov, eighteenth session; the first crawls of these pages, five of them):
    # 210-214 fetched, 92-96 duplicates among them, no unique page missed, 3 suppressed below
    # J 0.9 of their match in each (the contents pages of the two urllib3 hosts: 48 words,
    # the same but for the host's name; and one API page; the match holds 94 % of their
    # text). The ceilings stay under a crawl of every link, so a crawl that saves nothing
    # fails.
    _assert_figures(figures, full=(230, 112), fetched=222, duplicates_fetched=104, wrong=5)
    assert _suppressed_and_every_content_fetched(sites, out, figures) >= 60  # found: 93-97


@pytest.mark.timeout(600)
def test_a_crawl_of_shops_fetches_every_product_however_alike_the_template_makes_them(
    tmp_path: Path,
) -> None:
    """On ``shop.heavy`` a ~1,050-word template outweighs 25-200-word descriptions: 21 of its
    120 products resemble another page at J >= 0.9, so by the visible-text measure they are
    near-duplicates. Each is still the only page with its description, linked from its own
    category page: the crawl must fetch every one."""
    sites = _unpack(tmp_path / "sites", SHOP)
    out = tmp_path / "demo"
    figures = _crawl(sites, out)
    # A crawl of every link: 540 pages (the referrer copies of products among them), 289 of
    # them duplicates of a page fetched before. Measured (28 Nov): 347-360 fetched, 96-109
    # duplicates among them, 16-17 suppressed below J 0.9 of their match (the match holds
    # 90-94 % of their text: template pairs sit at the sketch's threshold), no product missed.
    # Without a product fetched ahead of its referrer copy (crawler/ahead.py): 412-413 and
    # 161-162, as the copies went out first and the product came later anyway.
    _assert_figures(figures, full=(540, 289), fetched=385, duplicates_fetched=130, wrong=24)
    # Measured 89-105 suppressed (165 before the fetch ahead: more copies fetched to suppress).
    assert _suppressed_and_every_content_fetched(sites, out, figures) >= 70
    decided, _ = _decided_files(sites, out, figures)
    products = sorted(p.resolve() for p in sites.glob("shop.*/p/*.html"))
    assert len(products) == 240
    assert not [p for p in products if p not in decided], "products never fetched"


def _assert_figures(
    figures: dict[str, Any],
    full: tuple[int, int],
    fetched: int,
    duplicates_fetched: int,
    wrong: int = 2,
) -> None:
    """The crawl of every link (pages, duplicates) is ``full``; the two numbers a user counts
    are within their floors: at most ``fetched`` fetches and ``duplicates_fetched``
    duplicates among them, no unique page missed, at most ``wrong`` wrong suppressions."""
    assert (figures["full_fetches"], figures["full_duplicates"]) == full
    assert figures["fetched"] <= fetched, figures
    assert figures["duplicates_fetched"] <= duplicates_fetched, figures
    assert figures["unique_missed"] == 0, figures["lost"]
    assert len(figures["wrong"]) <= wrong, figures["wrong"]


def _suppressed_and_every_content_fetched(sites: Path, out: Path, figures: dict[str, Any]) -> int:
    """Independently of the demo's scoring: every page's content, by its own resemblance, was
    fetched and decided. Returns how many decisions suppressed a page."""
    texts = _texts(sites)
    files = list(texts)
    pairs = similar_pairs(shingle_sets([texts[f] for f in files]), THRESHOLD)
    partners: dict[Path, set[Path]] = {f: {f} for f in files}
    for a, b in zip(pairs.left.tolist(), pairs.right.tolist(), strict=True):
        partners[files[a]].add(files[b])
        partners[files[b]].add(files[a])
    decided, suppressed = _decided_files(sites, out, figures)
    missing = [f for f in files if not {p.resolve() for p in partners[f]} & decided]
    assert not missing, f"{len(missing)} pages whose content was never fetched: {missing[:3]}"
    return suppressed


def _decided_files(sites: Path, out: Path, figures: dict[str, Any]) -> tuple[set[Path], int]:
    """The files the crawl's decisions fetched (a URL with a query the folder has no file for
    is its page without it), and how many decisions suppressed a page."""
    site = StaticSite(sites)
    hosts = {base.split("//")[1]: host for host, base in figures["site"].items()}
    decisions = fold_decisions(
        decode_decision(line) for line in (out / "decisions.jsonl").read_bytes().splitlines()
    )
    decided: set[Path] = set()
    suppressed = 0
    for key, decision in decisions.items():
        netloc, _, path = key.url.split("//")[1].partition("/")
        found = site.find(hosts[netloc], "/" + path)
        assert found is not None and found.path is not None, key.url
        decided.add(found.path.resolve())
        suppressed += decision.verdict.value in SUPPRESSED
    return decided, suppressed
