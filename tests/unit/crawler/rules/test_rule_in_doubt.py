"""A rule that went active on a lucky run of checks, then failed one: a simulated crawl.

The tail case of a 19-host crawl (README, "Real sites"): a host alias between two renderings of
one manual, most pages alike, went active after its first clean checks; its pages that differ
came later, and it kept skipping them. Here a mirror's first 20 pages (in the crawl's order) are
copies of the original's, then every second page of the next 30 is its own, the first of them
where the rule's exploration fetches a check. In doubt after that failure, the rule skips
nothing (coverage 1.0); without that, it skipped on until its next explored check failed too,
and lost 9 pages.
"""

from __future__ import annotations

import random

import pytest

from crawler.rules.policy import RulePolicy
from crawler.rules.shared import SharedRules
from neardup.demo.truth import Rendered, Truth, jaccard_partners, reachable
from tests.support.simulate import simulate

ORIGINAL, MIRROR = "http://docs.example", "http://mirror.example"
PAGES = 66


def _text(rng: random.Random) -> str:
    return " ".join(f"w{rng.randrange(100_000)}" for _ in range(120))


def _truth(own: frozenset[int] = frozenset()) -> Truth:
    """Two hosts of ``PAGES`` pages, each linked from its home page; the mirror's pages are
    copies of the original's but for the numbers in ``own``."""
    rng = random.Random(7)
    texts = {i: _text(rng) for i in range(1, PAGES)}
    rendered: dict[str, Rendered] = {}
    for base in (ORIGINAL, MIRROR):
        links = tuple(f"{base}/p{i}" for i in range(1, PAGES))
        # Home pages of their own: the mirror's links are followed as a new page's, so the
        # rule alone (not the judge of a duplicate's outlinks) decides what is skipped.
        rendered[f"{base}/"] = Rendered((base, "/"), f"{base}/", _text(rng), links)
        for i in range(1, PAGES):
            text = _text(rng) if base == MIRROR and i in own else texts[i]
            rendered[f"{base}/p{i}"] = Rendered((base, f"/p{i}"), f"{base}/p{i}", text, ())
    seeds = (f"{ORIGINAL}/", f"{MIRROR}/")
    return Truth(
        seeds=seeds,
        pages=tuple(reachable(rendered, seeds)),
        rendered=rendered,
        partners=jaccard_partners({url: page.text for url, page in rendered.items()}),
        construction={},
        traps=frozenset(),
        family={},
    )


def _own_pages_after_a_lucky_start() -> frozenset[int]:
    """The mirror's own pages, by their place in the crawl's order: the alias activates on
    its 11th clean check (the first 11 pages) and fetches its 10th prediction as a check (the
    21st page): the first own page, then every second one."""
    never_active = RulePolicy(activate_at=0.999)  # the crawl's own order: nothing skipped
    order = simulate(_truth(), "rules", never_active, order="bfs").fetch_log
    mirror = [int(url.rsplit("/p", 1)[1]) for url in order if url.startswith(f"{MIRROR}/p")]
    return frozenset(mirror[20:50:2])


def test_a_rule_in_doubt_stops_skipping_and_the_mirrors_own_pages_are_fetched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    truth = _truth(_own_pages_after_a_lucky_start())
    guarded = simulate(truth, "rules", order="bfs").measures(truth)
    assert guarded.coverage == 1.0, guarded.lost
    assert guarded.fetches < len(truth.pages) - 5  # the copies before the failure were skipped

    monkeypatch.setattr(SharedRules, "in_doubt", lambda self, key: False)
    unguarded = simulate(truth, "rules", order="bfs").measures(truth)
    assert len(unguarded.lost) >= 5, unguarded.as_dict()  # skipped until a second failure
