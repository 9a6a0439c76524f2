"""Ground truth of a site from its rendered pages, for coverage and waste (issue 13).

Every HTML page is rendered against the hosts' base URLs and extracted exactly as the spider
does (:func:`crawler.extract.extract`): its visible text and canonical outlinks. Two pages are
*partners* iff the Jaccard resemblance of their word 4-shingle sets is >= 0.9: the reference
relation of :mod:`neardup.evaluation.quality`, computed exactly (prefix and length filters, no
pair missed). ``subtree_truth`` also carries the construction's view (``neardup.demo.subtrees``):
the unit tests check that both agree.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from crawler.extract import extract
from crawler.urls import canonicalize_url
from neardup.demo.planted import Site
from neardup.demo.render import render
from neardup.demo.subtrees import Key, SubtreeSite
from neardup.evaluation.quality import THRESHOLD, shingle_sets, similar_pairs


@dataclass(frozen=True)
class Rendered:
    key: Key
    url: str
    text: str
    outlinks: tuple[str, ...]


def url_of(base: Mapping[str, str], key: Key) -> str:
    return canonicalize_url(base[key[0]] + key[1])


def render_site(site: Site, base: Mapping[str, str]) -> dict[str, Rendered]:
    """Every HTML page (no redirects, no raw bodies) by canonical URL."""
    pages = {}
    for key, spec in site.pages.items():
        if spec.raw is not None or spec.redirect_to is not None:
            continue
        url = url_of(base, key)
        extracted = extract(render(spec, dict(base)), url)
        pages[url] = Rendered(key, url, extracted.text, extracted.outlinks)
    return pages


def jaccard_partners(
    texts: Mapping[str, str], threshold: float = THRESHOLD
) -> dict[str, frozenset[str]]:
    """Each page's partners: the pages whose text resembles its own at >= ``threshold``."""
    urls = list(texts)
    pairs = similar_pairs(shingle_sets([texts[u] for u in urls]), threshold)
    found: dict[str, set[str]] = {}
    for left, right in zip(pairs.left.tolist(), pairs.right.tolist(), strict=True):
        found.setdefault(urls[left], set()).add(urls[right])
        found.setdefault(urls[right], set()).add(urls[left])
    return {url: frozenset(others) for url, others in found.items()}


def clique_partners(pairs: Iterable[tuple[str, str]]) -> dict[str, frozenset[str]]:
    """Partners when every connected group of pairs is one content (all copies of one page)."""
    groups: dict[str, set[str]] = {}
    for a, b in pairs:
        merged = groups.get(a, {a}) | groups.get(b, {b})
        for url in merged:
            groups[url] = merged
    return {url: frozenset(group - {url}) for url, group in groups.items()}


def reachable(
    pages: Mapping[str, Rendered],
    seeds: Iterable[str],
    redirects: Mapping[str, str] | None = None,
    excluded: Collection[str] = (),
) -> list[str]:
    """Pages reachable from the seeds along outlinks, in breadth-first order. A link to a
    ``redirects`` key leads to its value (as a crawler follows a redirect); ``excluded`` URLs
    (robots.txt) are never entered."""
    order: list[str] = []
    seen = set(seeds)
    queue = deque(seen)
    while queue:
        url = queue.popleft()
        target = (redirects or {}).get(url)
        if target is not None and target not in seen:
            seen.add(target)
            queue.append(target)
        if url not in pages or url in excluded:
            continue
        order.append(url)
        for link in pages[url].outlinks:
            if link not in seen:
                seen.add(link)
                queue.append(link)
    return order


@dataclass(frozen=True)
class Truth:
    """A site's ground truth by URL: seeds, reachable pages (breadth-first), each page's
    outlinks and text, partners (by Jaccard), trap pages, family of each page."""

    seeds: tuple[str, ...]
    pages: tuple[str, ...]
    rendered: Mapping[str, Rendered]
    partners: Mapping[str, frozenset[str]]
    construction: Mapping[str, frozenset[str]]
    traps: frozenset[str]
    family: Mapping[str, str]


def subtree_truth(sub: SubtreeSite, base: Mapping[str, str]) -> Truth:
    rendered = render_site(sub.site, base)
    seeds = tuple(url_of(base, key) for key in sub.seeds)
    copies = [(url_of(base, a), url_of(base, b)) for a, b in sub.copies]
    return Truth(
        seeds=seeds,
        pages=tuple(reachable(rendered, seeds)),
        rendered=rendered,
        partners=jaccard_partners({url: page.text for url, page in rendered.items()}),
        construction=clique_partners(copies),
        traps=frozenset(url_of(base, key) for key in sub.traps),
        family={url_of(base, key): family for key, family in sub.family.items()},
    )


def subtree_manifest(truth: Truth) -> dict[str, Any]:
    """JSON-ready: seeds, reachable pages, partners, traps, families (for e2e runs)."""
    return {
        "seeds": list(truth.seeds),
        "pages": list(truth.pages),
        "partners": {url: sorted(p) for url, p in sorted(truth.partners.items())},
        "traps": sorted(truth.traps),
        "family": dict(sorted(truth.family.items())),
    }
