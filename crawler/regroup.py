"""A duplicate's outlinks held back on a sample when its spider stopped, judged again by the
run that takes them.

A near-duplicate page's predicted duplicates wait in its judge
(:class:`~crawler.subtree_judge.SubtreeJudge`) while a sample of them is fetched. A spider
stopped before the end (no ``JOBDIR``) hands them to the crawl's shared list unclaimed, each
with its group in ``Request.meta`` (:func:`group_meta`: the page, its depth, its decision's
priority and the page it duplicates). The run that takes them keeps them until its idle moment
and judges each group again as if its page had just been decided a duplicate
(:func:`regroup`): by then that run's own groups of the same rewrite have brought their
samples in, so a group may be dropped or followed without a new sample. Handed over undecided
instead, each one cost a fetch. Pure: no Scrapy engine, no Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from crawler.frontier import Held
from crawler.judging import DecidedPage
from crawler.urls import canonicalize_url
from dedup_worker.contract.messages import Decision, Verdict
from dedup_worker.contract.reading import PageKey

#: ``Request.meta`` key of a duplicate's outlink handed over while its judge waited on a
#: sample: its group (:func:`group_meta`), or ``True`` (a release of 29 Nov, claimed: sent at
#: the idle moment as it is).
LIKELY_DUPLICATE_META = "neardup_likely_duplicate"
_FIELDS = ("url", "fetched_at", "depth", "priority", "keeper")


def group_meta(source: PageKey, depth: int, priority: float, keeper: str) -> dict[str, Any]:
    """The group of a held-back request, as JSON-ready ``Request.meta``: the page whose
    outlink it is (at ``depth``, its decision's ``priority``) and the page it duplicates."""
    return {
        "url": source.url,
        "fetched_at": source.fetched_at,
        "depth": depth,
        "priority": priority,
        "keeper": keeper,
    }


def has_group(request: Any) -> bool:
    """Whether ``request`` carries a well-formed group (judged again, not sent as it is): a
    page URL and the page it duplicates, a whole depth, numbers for the rest."""
    group = request.meta.get(LIKELY_DUPLICATE_META)
    if not isinstance(group, dict) or not all(name in group for name in _FIELDS):
        return False
    texts = (group["url"], group["keeper"])
    numbers = (group["fetched_at"], group["priority"])
    return (
        all(isinstance(text, str) and text for text in texts)
        and type(group["depth"]) is int
        and all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers)
    )


def regroup(requests: Sequence[Any], drop_params: frozenset[str]) -> list[DecidedPage]:
    """Each group's page as decided a duplicate now, with its requests (``has_group`` ones,
    their group taken out of their meta), in the order their pages first come."""
    groups: dict[PageKey, tuple[dict[str, Any], list[Held]]] = {}
    for request in requests:
        group = request.meta[LIKELY_DUPLICATE_META]
        key = PageKey(str(group["url"]), float(group["fetched_at"]))
        meta = {k: v for k, v in request.meta.items() if k != LIKELY_DUPLICATE_META}
        held = Held(canonicalize_url(request.url, drop_params), request.replace(meta=meta))
        groups.setdefault(key, (group, []))[1].append(held)
    return [
        DecidedPage(
            key,
            int(group["depth"]),
            tuple(item.url for item in held),
            _duplicate(key, float(group["priority"]), str(group["keeper"])),
            tuple(held),
        )
        for key, (group, held) in groups.items()
    ]


def _duplicate(key: PageKey, priority: float, keeper: str) -> Decision:
    """The decision the group's page had: a near duplicate of ``keeper`` (its fingerprint is
    not needed: judges read the URLs, the priority and ``follow_outlinks``)."""
    return Decision(
        url=key.url,
        host=urlsplit(key.url).hostname or "",
        fetched_at=key.fetched_at,
        decided_at=key.fetched_at,
        verdict=Verdict.NEAR_DUPLICATE,
        simhash="0" * 16,
        priority=priority,
        follow_outlinks=False,
        outlinks=(),
        duplicate_of=keeper,
    )
