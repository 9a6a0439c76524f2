"""The planted site's pages as HTML (:mod:`neardup.demo.planted`): one template per kind of
page (``Spec.template``), the navigation and footer that make its variants differ."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from neardup.demo import text

if TYPE_CHECKING:  # planted builds its pages with render: a type only, no import cycle
    from neardup.demo.planted import Spec

_SIDEBAR = " ".join(text.paragraphs(999, 1, per_paragraph=120))
_NAV = {
    "site": [
        ("main", "/", "Home"),
        ("main", "/articles/1", "Articles"),
        ("main", "/shop/", "Shop"),
    ],
    "shop": [
        ("main", "/", "Home"),
        ("main", "/articles/1", "Articles"),
        ("main", "/shop/", "Shop"),
    ],
    "mirror": [("mirror", "/guide", "Mirror index"), ("mirror", "/downloads", "Downloads")],
    "other": [("other", "/", "Blog")],
    "print": [],
}
_FOOTER = {
    "site": "Copyright Northwind Journal.",
    "shop": "Copyright Northwind Journal.",
    "mirror": "Hosted by Southgate Mirrors.",
    "other": "Written by hand.",
    "print": "",
}


def render(spec: Spec, base: dict[str, str]) -> bytes:
    """The page's HTML, with links made absolute against the hosts' base URLs."""
    if spec.raw is not None:
        return spec.raw

    def href(host: str, path: str) -> str:
        return escape(base[host] + path)

    links_of_nav = _NAV[spec.template] if spec.nav is None else spec.nav
    footer = _FOOTER[spec.template] if spec.footer is None else spec.footer
    nav = "".join(f'<a href="{href(h, p)}">{escape(label)}</a> ' for h, p, label in links_of_nav)
    body = "".join(f"<p>{escape(p)}</p>\n" for p in spec.body)
    extra = "".join(f"<p>{escape(line)}</p>\n" for line in spec.extra)
    links = "".join(
        f'<li><a href="{href(link.host, link.path)}">{escape(link.label)}</a></li>'
        for link in spec.links
    )
    sidebar = f"<aside><p>{escape(_SIDEBAR)}</p></aside>" if spec.template == "shop" else ""
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{escape(spec.title)}</title>"
        f"<style>body{{font-family:serif}}</style><script>var t={len(spec.body)};</script>"
        f"</head><body><header><nav>{nav}</nav></header><main><h1>{escape(spec.title)}</h1>"
        f"{body}{extra}<ul>{links}</ul></main>{sidebar}"
        f"<footer>{escape(footer)}</footer></body></html>"
    ).encode()
