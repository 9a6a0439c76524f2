"""A small three-host web site with planted near-duplicate families and its ground truth.

Hosts (see :mod:`neardup.demo.server` for the loopback addresses they are served on):

- ``main``: a magazine (seed ``/``): articles sharing one template, a shop whose product pages
  share a long sidebar, a guide, a status page; robots.txt disallows ``/private/``;
- ``mirror``: a mirror of the guide with different boilerplate;
- ``other``: an independent blog (seed of a second crawler) linking to ``main``'s home.

Each family has an original linked at depth 1 and a duplicate reachable only at depth >= 2, so
the original is fetched (and indexed) first; each duplicate links to pages of its own that
nothing else links to: a crawl that suppresses duplicates never fetches them.

============  ===========================================================================
family        duplicate of its original
============  ===========================================================================
mirror        same guide on the mirror host, other navigation, footer and host
print         ``/articles/3/print``: the article without navigation and footer
session       ``/shop/item-4?sessid=...``: a session id in the URL and shown on the page
timestamp     ``/status?refresh=1``: only the "checked at" time differs
counter       ``/articles/5?from=related``: only the view counter differs
ad            ``/articles/6?ad=2``: only the sponsored line differs
exact         ``/archive/2023/article-7``: byte-identical copy of ``/articles/7``
============  ===========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

from neardup.demo import text
from neardup.demo.render import render

HOSTS = ("main", "mirror", "other")
SESSION = "7f3a9c2e"
#: The body of a 404.
NOT_FOUND = b"<html><body>not here</body></html>"


@dataclass(frozen=True)
class Link:
    host: str
    path: str
    label: str


@dataclass
class Spec:
    """One page: where it is, what it says, where it links, how it is rendered."""

    host: str
    path: str  # with the query string, exactly as linked
    title: str = ""
    body: list[str] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    template: str = "site"  # site | shop | print | mirror | other
    extra: list[str] = field(default_factory=list)  # lines that differ between variants
    redirect_to: str | None = None
    content_type: str = "text/html; charset=utf-8"
    raw: bytes | None = None
    nav: list[tuple[str, str, str]] | None = None  # (host, path, label); None: the template's
    footer: str | None = None  # None: the template's


@dataclass(frozen=True)
class Family:
    kind: str
    original: tuple[str, str]
    duplicate: tuple[str, str]
    only_via_duplicate: tuple[tuple[str, str], ...]
    verdict: str = "near_duplicate"


@dataclass
class Site:
    pages: dict[tuple[str, str], Spec]
    families: list[Family]
    robots: dict[str, str]
    disallowed: list[tuple[str, str]]
    aliases: list[tuple[str, str]]  # link spellings the crawler canonicalises away
    redirects: list[tuple[tuple[str, str], tuple[str, str]]]
    non_html: list[tuple[str, str]]
    hosts: tuple[str, ...] = HOSTS

    def add(self, spec: Spec) -> Spec:
        self.pages[(spec.host, spec.path)] = spec
        return spec

    def respond(
        self, host: str, path: str, base: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        """The response to ``GET path`` on ``host`` (for :mod:`~neardup.demo.server`)."""
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, self.robots[host].encode()
        spec = self.pages.get((host, path))
        if spec is None:
            return 404, {"Content-Type": "text/html"}, NOT_FOUND
        if spec.redirect_to is not None:
            return 301, {"Location": base[host] + spec.redirect_to}, b""
        return 200, {"Content-Type": spec.content_type}, render(spec, base)


def article(seed: int, path: str, links: list[Link], paragraphs: int = 8) -> Spec:
    return Spec("main", path, text.title(seed), text.paragraphs(seed, paragraphs), links)


def build_site() -> Site:
    site = Site({}, [], {}, [], [], [], [])
    _main_pages(site)
    _families(site)
    _shop(site)
    _other(site)
    site.robots = {host: "User-agent: *\nAllow: /\n" for host in HOSTS}
    site.robots["main"] = "User-agent: *\nDisallow: /private/\n"
    return site


def _main_pages(site: Site) -> None:
    home_links = [Link("main", f"/articles/{i}", f"Article {i}") for i in range(1, 9)] + [
        Link("main", "/guide", "The guide"),
        Link("main", "/shop/", "Shop"),
        Link("main", "/status", "Service status"),
        Link("main", "/partners", "Partners"),
        Link("main", "/moved", "Our new home"),
        Link("main", "/private/ledger", "Internal ledger"),
        Link("main", "/files/report.pdf", "Annual report"),
        Link("main", f"/shop/item-1;jsessionid={SESSION}", "Featured product"),
        Link("other", "/", "A friendly blog"),
    ]
    site.add(Spec("main", "/", "Northwind Journal", text.paragraphs(1, 4), home_links))
    for i in (1, 2, 4, 8):
        site.add(article(100 + i, f"/articles/{i}", [Link("main", "/", "Back home")]))
    site.add(Spec("main", "/about", "About us", text.paragraphs(150, 3), []))
    site.add(
        Spec(
            "main",
            "/partners",
            "Partners",
            text.paragraphs(151, 3),
            [Link("mirror", "/guide", "The guide, mirrored")],
        )
    )
    site.add(Spec("main", "/moved", redirect_to="/articles/new-home"))
    site.add(article(152, "/articles/new-home", []))
    site.add(Spec("main", "/private/ledger", "Ledger", text.paragraphs(153, 3)))
    site.add(
        Spec(
            "main",
            "/files/report.pdf",
            content_type="application/pdf",
            raw=b"%PDF-1.4\n" + b"0" * 4000,
        )
    )
    site.redirects.append((("main", "/moved"), ("main", "/articles/new-home")))
    site.disallowed.append(("main", "/private/ledger"))
    site.non_html.append(("main", "/files/report.pdf"))
    site.aliases.append(("main", f"/shop/item-1;jsessionid={SESSION}"))


def _families(site: Site) -> None:
    _mirror(site)
    _print(site)
    _timestamp(site)
    _counter(site)
    _ad(site)
    _exact(site)


def _link_from_original(
    site: Site, original: tuple[str, str], variant: tuple[str, str], label: str
) -> None:
    """Make the variant reachable only through its original's page, so a crawl always fetches
    (and decides) the original first: earliest-wins then keeps the original. (A variant linked
    from another page could finish downloading first, and would then rightly be the keeper.)
    The variant carries the same anchor text, so the two texts differ only where planted."""
    site.pages[original].links.append(Link(*variant, label))
    site.pages[variant].links.append(Link(*variant, label))


def _mirror(site: Site) -> None:
    chapters = [Link("main", f"/guide/chapter-{i}", f"Chapter {i}") for i in (1, 2)]
    # Seed chosen so the mirror lands within k=3 (simhash variance: see test_site.py).
    guide = site.add(article(233, "/guide", chapters, paragraphs=9))
    for i in (1, 2):
        site.add(article(210 + i, f"/guide/chapter-{i}", []))
    mirrored = [Link("mirror", link.path, link.label) for link in chapters]
    site.add(Spec("mirror", "/guide", guide.title, guide.body, mirrored, template="mirror"))
    for i in (1, 2):
        site.add(
            Spec(
                "mirror",
                f"/guide/chapter-{i}",
                text.title(220 + i),
                text.paragraphs(220 + i, 6),
                template="mirror",
            )
        )
    only = tuple(("mirror", f"/guide/chapter-{i}") for i in (1, 2))
    site.families.append(Family("mirror", ("main", "/guide"), ("mirror", "/guide"), only))


def _print(site: Site) -> None:
    print_link = Link("main", "/articles/3/print", "Print this article")
    original = site.add(article(300, "/articles/3", [print_link], paragraphs=10))
    notes = Link("main", "/articles/3/print/notes", "Printer notes")
    site.add(
        Spec("main", print_link.path, original.title, original.body, [notes], template="print")
    )
    site.add(article(301, notes.path, []))
    only = (("main", notes.path),)
    site.families.append(Family("print", ("main", "/articles/3"), ("main", print_link.path), only))


def _timestamp(site: Site) -> None:
    body = text.paragraphs(400, 8)
    history = "/status/history"
    site.add(
        Spec(
            "main",
            "/status",
            "Service status",
            body,
            [Link("main", history, "History")],
            extra=["Status checked at 2024-05-17 10:32:05 UTC."],
        )
    )
    site.add(article(401, history, []))
    variant = "/status?refresh=1"
    site.add(
        Spec(
            "main",
            variant,
            "Service status",
            body,
            [Link("main", history + "?refresh=1", "History")],
            extra=["Status checked at 2024-05-17 10:47:51 UTC."],
        )
    )
    site.add(article(402, history + "?refresh=1", []))
    _link_from_original(site, ("main", "/status"), ("main", variant), "Live status")
    only = (("main", history + "?refresh=1"),)
    site.families.append(Family("timestamp", ("main", "/status"), ("main", variant), only))


def _counter(site: Site) -> None:
    comments = "/articles/5/comments"
    original = site.add(article(500, "/articles/5", [Link("main", comments, "Comments")], 9))
    original.extra = ["This article was viewed 1523 times."]
    site.add(article(501, comments, []))
    variant = "/articles/5?from=related"
    site.add(
        Spec(
            "main",
            variant,
            original.title,
            original.body,
            [Link("main", comments + "?from=related", "Comments")],
            # Chosen so the pair sits within k under the engine's default features (a counter
            # change moves simhash by a few bits, sometimes more: recall is what neardup eval
            # measures; this site has to be deterministic).
            extra=["This article was viewed 1528 times."],
        )
    )
    site.add(article(502, comments + "?from=related", []))
    _link_from_original(site, ("main", "/articles/5"), ("main", variant), "Related reading")
    only = (("main", comments + "?from=related"),)
    site.families.append(Family("counter", ("main", "/articles/5"), ("main", variant), only))


def _ad(site: Site) -> None:
    gallery = "/articles/6/gallery"
    original = site.add(article(600, "/articles/6", [Link("main", gallery, "Gallery")], 10))
    original.extra = ["Sponsored: cheap flights to Lisbon."]
    site.add(article(601, gallery, []))
    variant = "/articles/6?ad=2"
    site.add(
        Spec(
            "main",
            variant,
            original.title,
            original.body,
            [Link("main", gallery + "?ad=2", "Gallery")],
            extra=["Sponsored: hotel rooms in Porto."],
        )
    )
    site.add(article(602, gallery + "?ad=2", []))
    _link_from_original(site, ("main", "/articles/6"), ("main", variant), "Photo story")
    only = (("main", gallery + "?ad=2"),)
    site.families.append(Family("ad", ("main", "/articles/6"), ("main", variant), only))


def _exact(site: Site) -> None:
    original = site.add(article(700, "/articles/7", [Link("main", "/", "Back home")]))
    copy = "/archive/2023/article-7"
    site.add(
        Spec(
            "main",
            copy,
            original.title,
            original.body,
            [Link("main", "/archive/2023/", "Back home")],
        )
    )
    site.add(article(701, "/archive/2023/", []))
    _link_from_original(site, ("main", "/articles/7"), ("main", copy), "From the archive")
    only = (("main", "/archive/2023/"),)
    site.families.append(
        Family("exact", ("main", "/articles/7"), ("main", copy), only, "exact_duplicate")
    )


def _shop(site: Site) -> None:
    items = [Link("main", f"/shop/item-{i}", f"Product {i}") for i in range(1, 7)]
    site.add(Spec("main", "/shop/", "Shop", text.paragraphs(800, 2), items))
    for i in range(1, 7):
        reviews = [Link("main", f"/shop/item-{i}/reviews", "Reviews")] if i == 4 else []
        site.add(
            Spec(
                "main",
                f"/shop/item-{i}",
                text.title(810 + i),
                text.paragraphs(810 + i, 3),
                reviews,
                template="shop",
            )
        )
    site.add(article(820, "/shop/item-4/reviews", []))
    variant = f"/shop/item-4?sessid={SESSION}"
    item4 = site.pages[("main", "/shop/item-4")]
    site.add(
        Spec(
            "main",
            variant,
            item4.title,
            item4.body,
            [Link("main", f"/shop/item-4/reviews?sessid={SESSION}", "Reviews")],
            template="shop",
            extra=[f"Session {SESSION}"],
        )
    )
    site.add(article(821, f"/shop/item-4/reviews?sessid={SESSION}", []))
    _link_from_original(site, ("main", "/shop/item-4"), ("main", variant), "Also bought")
    only = (("main", f"/shop/item-4/reviews?sessid={SESSION}"),)
    site.families.append(Family("session", ("main", "/shop/item-4"), ("main", variant), only))


def _other(site: Site) -> None:
    posts = [Link("other", f"/blog/{i}", f"Post {i}") for i in range(1, 5)]
    site.add(
        Spec(
            "other",
            "/",
            "Other blog",
            text.paragraphs(900, 3),
            [*posts, Link("main", "/", "Northwind Journal")],
            template="other",
        )
    )
    for i in range(1, 5):
        site.add(
            Spec(
                "other",
                f"/blog/{i}",
                text.title(900 + i),
                text.paragraphs(900 + i, 6),
                [Link("other", "/", "Blog home")],
                template="other",
            )
        )
