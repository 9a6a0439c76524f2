"""Shops: short real texts inside a heavy shared template (``build_corpus.py --sites DIR --shop``).

The documentation sites share templates of a few hundred words around pages of hundreds to
thousands. A shop is the other common shape of a real site: each product page has a short
description (25-200 words) inside a template of header, mega-menu and footer that every page
repeats. Two hosts:

* ``shop.light``: a ~300-word template (six categories a department in the menu);
* ``shop.heavy``: a ~1,050-word template (fourteen a department, and a footer listing the
  brands and popular searches, as department stores do).

On the heavy host the template outweighs a short description so far that two different
products resemble each other at J >= 0.9 of their visible text: by the definition every figure
here uses (word 4-shingles of what a person sees), those pages *are* near-duplicates. A crawl
must still fetch every product: a product page is reached from its category page, its own URL,
and its description is text no other page holds. ``neardup demo --site`` counts that as
"text never fetched".

Real-site duplicates are planted too: a category's list sorted by price
(``/c/3.html?sort=price``, the same items in another order) and the "customers also bought"
links carrying a referrer parameter (``/p/17.html?ref=also``, the same page).

The descriptions are windows of English man pages of this machine (``/usr/share/man``, sections
1 and 8, as the ``short`` family reads them), one page per product; names (departments,
categories, products, brands) are words of those pages. Every choice is a stable hash, so two
builds on one machine write the same bytes.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from dataclasses import dataclass
from html import escape
from pathlib import Path

from corpus_sources.common import stable_fraction, stable_int
from corpus_sources.original import troff_text

MAN = Path("/usr/share/man")
DEPARTMENTS = 12
_WORD = re.compile(r"[A-Za-z]{4,10}")


@dataclass(frozen=True)
class ShopShape:
    """One host: its name, menu categories a department, footer directory entries."""

    host: str
    menu_per_department: int
    directory: int


SHAPES = (ShopShape("shop.light", 6, 0), ShopShape("shop.heavy", 14, 220))


@dataclass(frozen=True)
class Product:
    category: int
    title: str
    description: str
    cents: int


def man_texts() -> Iterator[tuple[str, list[str]]]:
    """(name, words) of the English man pages of sections 1 and 8 with 300+ words, by name."""
    for section in ("man1", "man8"):
        for path in sorted((MAN / section).glob("*.gz")):
            if path.is_symlink() or path.name.startswith("gcloud"):
                continue
            source = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
            if source.lstrip().startswith(".so "):
                continue
            words = troff_text(source).split()
            if len(words) >= 300:
                yield path.name.removesuffix(".gz"), words


class Names:
    """Capitalised words of the texts, picked by stable hash: "Verbose Archive"."""

    def __init__(self, texts: list[tuple[str, list[str]]]) -> None:
        self.words = sorted({w.lower() for _, words in texts for w in words if _WORD.fullmatch(w)})
        if not self.words:
            raise ValueError("no words to name things with")

    def name(self, key: str, words: int) -> str:
        picked = (
            self.words[stable_int(f"{key}:{i}", 0, len(self.words) - 1)] for i in range(words)
        )
        return " ".join(word.capitalize() for word in picked)


def write_shops(
    out: Path, scale: float = 1.0, texts: list[tuple[str, list[str]]] | None = None
) -> dict[str, int]:
    """Write both hosts under ``out`` (480 products in 60 categories each at scale 1), from
    ``texts`` ((name, words) of 300+ words; default: this machine's man pages)."""
    texts = list(man_texts()) if texts is None else list(texts)
    if len(texts) < 2 * len(SHAPES):
        raise FileNotFoundError(
            f"too few man pages under {MAN} to build the shops (their descriptions are man "
            "page text): install some, e.g. apt-get install man-db manpages"
        )
    texts.sort(key=lambda item: stable_fraction("shop:" + item[0]))
    names = Names(texts)
    categories = max(6, round(60 * scale))
    products = max(2 * categories, round(480 * scale))
    written = {}
    for index, shape in enumerate(SHAPES):
        own = texts[index :: len(SHAPES)]  # the hosts share no description
        written[shape.host] = _write_shop(out / shape.host, shape, own, names, categories, products)
    return written


def _products(
    host: str, texts: list[tuple[str, list[str]]], names: Names, categories: int, count: int
) -> list[Product]:
    made = []
    for i in range(count):
        name, words = texts[i % len(texts)]
        key = f"{host}:p{i}:{name}"
        length = stable_int(key + ":length", 25, 200)
        start = stable_int(key + ":start", 0, len(words) - length)
        made.append(
            Product(
                category=i % categories,
                title=names.name(key, stable_int(key + ":title", 2, 4)),
                description=" ".join(words[start : start + length]),
                cents=stable_int(key + ":price", 199, 19_999),
            )
        )
    return made


def _price(cents: int) -> str:
    return f"EUR {cents // 100}.{cents % 100:02d}"


def _template(shape: ShopShape, names: Names, categories: int) -> tuple[str, str]:
    """The header with its mega-menu, and the footer, of every page of a host."""
    menu = []
    for d in range(DEPARTMENTS):
        department = names.name(f"{shape.host}:d{d}", 1)
        labels = [
            names.name(f"{shape.host}:d{d}:c{j}", stable_int(f"{d}:{j}", 1, 3))
            for j in range(shape.menu_per_department)
        ]
        items = "".join(
            f"<li><a href='/c/{(d * shape.menu_per_department + j) % categories}.html'>"
            f"{escape(label)}</a></li>"
            for j, label in enumerate(labels)
        )
        menu.append(
            f"<li><a href='/c/{d % categories}.html'>{escape(department)}</a><ul>{items}</ul></li>"
        )
    header = (
        "<header><p>Northwind Outfitters</p><ul><li>Sign in</li><li>Register</li>"
        "<li>Wish list</li><li>Cart (0 items)</li><li>Track your order</li>"
        "<li>Help and contact</li><li>Find a store</li></ul><p>Free delivery on orders over 50 "
        "EUR. Free returns within 30 days. Pay later with invoice.</p></header>"
        f"<nav><ul>{''.join(menu)}</ul></nav>"
    )
    directory = ""
    if shape.directory:
        brands = "".join(
            f"<li>{escape(names.name(f'{shape.host}:b{i}', stable_int(f'b{i}', 1, 2)))}</li>"
            for i in range(shape.directory)
        )
        searches = "".join(
            f"<li>{escape(names.name(f'{shape.host}:s{i}', stable_int(f's{i}', 2, 3)))}</li>"
            for i in range(shape.directory // 2)
        )
        directory = (
            f"<h4>Our brands</h4><ul>{brands}</ul><h4>Popular searches</h4><ul>{searches}</ul>"
        )
    footer = (
        "<footer><h4>Customer service</h4><ul><li>Contact us</li><li>Delivery</li>"
        "<li>Returns and refunds</li><li>Payment options</li><li>Size guide</li>"
        "<li>Gift cards</li><li>Product recalls</li><li>FAQ</li></ul><h4>About us</h4><ul>"
        "<li>Our story</li><li>Careers</li><li>Press</li><li>Sustainability</li></ul>"
        "<h4>Legal</h4><ul><li>Terms and conditions</li><li>Privacy notice</li>"
        "<li>Cookie settings</li><li>Imprint</li></ul><p>Sign up for our newsletter and get 10 "
        "percent off your first order. You can unsubscribe at any time. We send at most one "
        "email a week with new arrivals, offers and ideas for your home and garden.</p>"
        f"{directory}<p>Copyright 2026 Northwind Outfitters GmbH. All prices include VAT.</p>"
        "</footer>"
    )
    return header, footer


def _write_shop(
    root: Path,
    shape: ShopShape,
    texts: list[tuple[str, list[str]]],
    names: Names,
    categories: int,
    count: int,
) -> int:
    header, footer = _template(shape, names, categories)

    def page(path: str, title: str, body: str) -> None:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{escape(title)} | Northwind Outfitters</title></head>"
            f"<body>{header}<main>{body}</main>{footer}</body></html>",
            encoding="utf-8",
        )

    products = _products(shape.host, texts, names, categories, count)
    titles = [
        names.name(f"{shape.host}:c{c}", stable_int(f"c{c}", 1, 3)) for c in range(categories)
    ]
    for i, product in enumerate(products):
        also = [stable_int(f"{shape.host}:p{i}:also{k}", 0, count - 1) for k in range(4)]
        related = "".join(
            f"<li><a href='/p/{r}.html?ref=also'>{escape(products[r].title)}</a></li>" for r in also
        )
        page(
            f"p/{i}.html",
            product.title,
            f"<p><a href='/'>Home</a> / <a href='/c/{product.category}.html'>"
            f"{escape(titles[product.category])}</a></p><h1>{escape(product.title)}</h1>"
            f"<p>{_price(product.cents)}</p><p>Item {100_000 + i}. In stock, ships in 1-2 "
            f"days.</p><h2>Description</h2><p>{escape(product.description)}</p>"
            f"<h2>Customers also bought</h2><ul>{related}</ul>",
        )
    for c, title in enumerate(titles):
        items = [(i, p) for i, p in enumerate(products) if p.category == c]
        for suffix, listed in (
            ("", items),
            ("?sort=price", sorted(items, key=lambda x: x[1].cents)),
        ):
            rows = "".join(
                f"<li><a href='/p/{i}.html'>{escape(p.title)}</a> {_price(p.cents)}</li>"
                for i, p in listed
            )
            page(
                f"c/{c}.html{suffix}",
                title,
                f"<h1>{escape(title)}</h1><p>{len(items)} products. Sort by: "
                f"<a href='/c/{c}.html'>relevance</a>, <a href='/c/{c}.html?sort=price'>price"
                f"</a></p><ul>{rows}</ul>",
            )
    featured = sorted(range(count), key=lambda i: stable_fraction(f"{shape.host}:f{i}"))[:10]
    page(
        "index.html",
        "Home",
        "<h1>New this week</h1><ul>"
        + "".join(
            f"<li><a href='/p/{i}.html'>{escape(products[i].title)}</a></li>" for i in featured
        )
        + "</ul>",
    )
    return sum(1 for _ in root.rglob("*.html*"))
