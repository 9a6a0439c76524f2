"""A documentation site whose duplicates come in subtrees, with its ground truth (issue 13).

Two hosts (served like :mod:`neardup.demo.planted`, see :mod:`neardup.demo.server`):
``docs`` (seed ``/``) and ``pubmirror``. Families:

=========  ===================================================================================
mirror     ``docs:/manual/<section>/topic-NN`` (5 sections x 12 topics) copied, other
           navigation and footer, to ``pubmirror:/pub/manual-3.2/<section>/topic-NN``. The
           copies are linked only from unique blog posts (``docs:/blog/N``, 4 each), never from
           a duplicate page: only a rule (the prefix rewrite) can skip them.
release    ``docs:/release/1.0/`` and ``/release/2.0/``: near-duplicate index pages (same intro,
           same chapter titles). Of 30 chapters, 12 are unchanged in 2.0 (duplicates) and 18
           rewritten beyond the threshold (3 of 5 paragraphs new), each linking to a new
           "what's new" page: the 2.0 index's outlinks must be followed.
params     ``docs:/catalog/item-N`` (40 items), each with three variants showing the same item:
           ``?print=1`` (no navigation, no footer), ``?sort=newest|price|rating`` (one line
           "Reviews sorted by ...") and ``?sessid=<token>`` (one line "Session ...").
trap       listings ``/news/`` and ``/events/`` (``?page=N``), ``/jobs/`` and ``/archiv/``
           (``?seite=N``, a pagination name no prior list knows): pages 2..5 share the
           listing's template but list other stories, each story linked from one listing page
           only. ``?page=1`` is the listing itself (an exact duplicate): the parameter looks
           droppable, and is not.
=========  ===================================================================================

Ground truth by construction: ``copies`` (pairs of same-content pages, J >= 0.9 with each
other and with nothing else), ``traps`` (pages a parameter distinguishes). :mod:`neardup.demo.truth`
computes the relation from the rendered pages and the unit tests check that both agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from neardup.demo import text
from neardup.demo.planted import Link, Site, Spec

Key = tuple[str, str]
HOSTS = ("docs", "pubmirror")
SEEDS: tuple[Key, ...] = (("docs", "/"),)
SECTIONS = ("install", "configure", "operate", "extend", "reference")
TOPICS = 12
MIRROR_PREFIX = "/pub/manual-3.2"
CHAPTERS = 30
ITEMS = 40
SORTS = ("newest", "price", "rating")
LISTINGS = (("news", "page"), ("events", "page"), ("jobs", "seite"), ("archiv", "seite"))
LISTING_PAGES = 5
STORIES_PER_PAGE = 3

_DOCS_NAV = [
    ("docs", "/", "Home"),
    ("docs", "/manual/", "Manual"),
    ("docs", "/catalog/", "Catalog"),
    ("docs", "/community/", "Community"),
]
_DOCS_FOOTER = "Example Docs, all rights reserved."
_MIRROR_NAV = [("pubmirror", "/", "Mirror home")]
_MIRROR_FOOTER = "Mirrored by Pub Mirrors for faster downloads."


@dataclass
class SubtreeSite:
    site: Site
    seeds: tuple[Key, ...] = SEEDS
    copies: list[tuple[Key, Key]] = field(default_factory=list)  # (copy, original)
    family: dict[Key, str] = field(default_factory=dict)
    traps: set[Key] = field(default_factory=set)

    def add(self, spec: Spec, family: str) -> Spec:
        self.family[(spec.host, spec.path)] = family
        return self.site.add(spec)

    def copy(self, original: Spec, path: str, family: str, **changes: object) -> Spec:
        """A page with ``original``'s title, text and links at ``path`` (same host unless
        ``host`` is given), with the given changes (nav, footer, extra lines)."""
        spec = Spec(
            str(changes.pop("host", original.host)),
            path,
            original.title,
            list(original.body),
            list(original.links),
            nav=original.nav,
            footer=original.footer,
            extra=list(original.extra),
        )
        for name, value in changes.items():
            setattr(spec, name, value)
        self.copies.append(((spec.host, spec.path), (original.host, original.path)))
        return self.add(spec, family)


def docs_page(path: str, title: str, body: list[str], links: list[Link]) -> Spec:
    return Spec("docs", path, title, body, links, nav=list(_DOCS_NAV), footer=_DOCS_FOOTER)


def build_subtree_site() -> SubtreeSite:
    sub = SubtreeSite(Site({}, [], {}, [], [], [], [], hosts=HOSTS))
    home_links = [
        Link("docs", "/manual/", "The manual"),
        Link("docs", "/release/", "Release guides"),
        Link("docs", "/catalog/", "Catalog"),
        Link("docs", "/community/", "Community"),
        *(Link("docs", f"/{name}/", name.capitalize()) for name, _ in LISTINGS),
    ]
    sub.add(docs_page("/", "Example Docs", text.paragraphs(19000, 2), home_links), "glue")
    _manual_and_mirror(sub)
    _releases(sub)
    _catalog(sub)
    for number, (name, param) in enumerate(LISTINGS):
        _listing(sub, number, name, param)
    sub.site.robots = {host: "User-agent: *\nAllow: /\n" for host in HOSTS}
    return sub


def _manual_and_mirror(sub: SubtreeSite) -> None:
    sections = [Link("docs", f"/manual/{s}/", f"Part {s}") for s in SECTIONS]
    sub.add(docs_page("/manual/", "Manual", text.paragraphs(19001, 1), sections), "glue")
    mirrored: list[Link] = []
    for k, section in enumerate(SECTIONS):
        topics = []
        for t in range(1, TOPICS + 1):
            seed = 20000 + 100 * k + t
            path = f"/manual/{section}/topic-{t:02d}"
            leaf = sub.add(docs_page(path, text.title(seed), text.paragraphs(seed, 5), []), "glue")
            topics.append(Link("docs", path, leaf.title))
            mirror_path = f"{MIRROR_PREFIX}/{section}/topic-{t:02d}"
            sub.copy(
                leaf,
                mirror_path,
                "mirror",
                host="pubmirror",
                nav=list(_MIRROR_NAV),
                footer=_MIRROR_FOOTER,
            )
            mirrored.append(Link("pubmirror", mirror_path, f"{leaf.title} (mirror)"))
        body = text.paragraphs(19010 + k, 1)
        sub.add(docs_page(f"/manual/{section}/", f"Part {section}", body, topics), "glue")
    mirror_home = Spec("pubmirror", "/", "Pub Mirrors", text.paragraphs(19050, 2), [])
    mirror_home.nav, mirror_home.footer = list(_MIRROR_NAV), _MIRROR_FOOTER
    sub.add(mirror_home, "glue")
    posts = [Link("docs", f"/blog/{n}", f"Post {n}") for n in range(1, len(mirrored) // 4 + 1)]
    community = [Link("docs", "/blog/", "Blog")]
    sub.add(docs_page("/community/", "Community", text.paragraphs(19060, 1), community), "glue")
    sub.add(docs_page("/blog/", "Blog", text.paragraphs(19061, 1), posts), "glue")
    for n, post in enumerate(posts):
        links = mirrored[4 * n : 4 * n + 4]
        body = text.paragraphs(19100 + n, 3)
        sub.add(docs_page(post.path, text.title(19100 + n), body, links), "glue")


def _releases(sub: SubtreeSite) -> None:
    versions = [Link("docs", f"/release/{v}/", f"Guide {v}") for v in ("1.0", "2.0")]
    sub.add(docs_page("/release/", "Release guides", text.paragraphs(19070, 1), versions), "glue")
    titles = [text.title(21000 + i) for i in range(CHAPTERS)]
    intro = text.paragraphs(19080, 3)
    for version in ("1.0", "2.0"):
        chapters = [
            Link("docs", f"/release/{version}/chapter-{i:02d}", titles[i]) for i in range(CHAPTERS)
        ]
        body = [*intro, f"This guide covers release {version}."]
        title = f"Release guide {version}"
        if version == "1.0":
            first = sub.add(docs_page(f"/release/{version}/", title, body, chapters), "glue")
        else:
            changes = {"title": title, "body": body, "links": chapters}
            sub.copy(first, f"/release/{version}/", "release", **changes)
    for i in range(CHAPTERS):
        old = text.paragraphs(21000 + i, 5)
        v1 = sub.add(docs_page(f"/release/1.0/chapter-{i:02d}", titles[i], old, []), "glue")
        path = f"/release/2.0/chapter-{i:02d}"
        if i % 5 in (0, 1):
            sub.copy(v1, path, "release")
            continue
        whatsnew = f"{path}/whatsnew"
        new_body = old[:2] + text.paragraphs(21500 + i, 3)
        sub.add(
            docs_page(path, titles[i], new_body, [Link("docs", whatsnew, "What's new")]), "glue"
        )
        sub.add(
            docs_page(whatsnew, text.title(21700 + i), text.paragraphs(21700 + i, 3), []), "glue"
        )


def _catalog(sub: SubtreeSite) -> None:
    items = [Link("docs", f"/catalog/item-{n}", f"Item {n}") for n in range(1, ITEMS + 1)]
    sub.add(docs_page("/catalog/", "Catalog", text.paragraphs(19090, 1), items), "glue")
    for n in range(1, ITEMS + 1):
        path = f"/catalog/item-{n}"
        sort = SORTS[n % len(SORTS)]
        session = f"{(n * 2654435761) % 2**32:08x}"
        variants = [
            Link("docs", f"{path}?print=1", "Print view"),
            Link("docs", f"{path}?sort={sort}", "Sort reviews"),
            Link("docs", f"{path}?sessid={session}", "Keep my session"),
        ]
        item = sub.add(
            docs_page(path, text.title(22000 + n), text.paragraphs(22000 + n, 3), variants), "glue"
        )
        sub.copy(item, variants[0].path, "params", nav=[], footer="")
        sub.copy(item, variants[1].path, "params", extra=[f"Reviews sorted by {sort}."])
        sub.copy(item, variants[2].path, "params", extra=[f"Session {session}."])


def _listing(sub: SubtreeSite, number: int, name: str, param: str) -> None:
    base = f"/{name}/"
    intro = text.paragraphs(19200 + number, 1)
    pager = [Link("docs", f"{base}?{param}={p}", f"Page {p}") for p in range(1, LISTING_PAGES + 1)]
    first: Spec | None = None
    for page in range(1, LISTING_PAGES + 1):
        stories, teasers = [], []
        for j in range(STORIES_PER_PAGE):
            seed = 23000 + 1000 * number + 10 * page + j
            story = f"{base}story-{page}-{j}"
            teasers.extend(text.paragraphs(seed + 500, 1, per_paragraph=30))
            sub.add(docs_page(story, text.title(seed), text.paragraphs(seed, 4), []), "glue")
            stories.append(Link("docs", story, text.title(seed)))
        path = base if page == 1 else f"{base}?{param}={page}"
        title = f"{name.capitalize()}, page {page}"
        spec = docs_page(path, title, [*intro, *teasers], [*pager, *stories])
        sub.add(spec, "glue" if page == 1 else "trap")
        if page == 1:
            first = spec
        else:
            sub.traps.add(("docs", path))
    assert first is not None
    sub.copy(first, f"{base}?{param}=1", "trap")
