"""Page extraction: what a person sees on a fetched page, plus its outlinks.

``extract(body, url, declared_encoding)`` turns raw response bytes into an :class:`Extracted`:
the ``<title>``, the visible text (one block element per line, table cells tab-separated), the
h1-h3 headings (the fingerprint may weight them) and the canonical http(s) outlinks.

Parsing is lxml's HTML parser (libxml2) feeding parse events straight into one walk
(:mod:`crawler._lxml_walk`): no tree is built, nothing recurses, so deeply nested pages work, and
hidden or never-rendered subtrees (script, style, svg...) add no text. The BeautifulSoup version
this replaced is kept as :mod:`crawler.extract_bs4`, the reference the tests compare against.

Nothing here raises on bad input: undecodable bytes become U+FFFD and any markup parses.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache

from w3lib.encoding import html_body_declared_encoding, read_bom, resolve_encoding, to_unicode

from crawler._lxml_walk import walk_html
from crawler.urls import DEFAULT_DROP_PARAMS, resolve_links

logger = logging.getLogger(__name__)

# walk_html (parse and walk, without decoding or resolving links) is public for the stage
# timings of benchmarks/bench_extract.py.
__all__ = ["DEFAULT_OPTIONS", "ExtractOptions", "Extracted", "decode_html", "extract", "walk_html"]


@dataclass(frozen=True, slots=True)
class ExtractOptions:
    """Knobs for :func:`extract`."""

    #: Emit ``<img alt>`` text inline, as a screen reader would.
    include_alt_text: bool = False
    #: Leave out ``rel="nofollow"`` links, and all links of a ``<meta name="robots"
    #: content="nofollow">`` page.
    respect_nofollow: bool = True
    #: Query/path parameter names dropped from outlinks (see :mod:`crawler.urls`).
    drop_params: frozenset[str] = DEFAULT_DROP_PARAMS


DEFAULT_OPTIONS = ExtractOptions()


@dataclass(frozen=True, slots=True)
class Extracted:
    """The result of :func:`extract`. ``text`` lines are whitespace-normalised and non-empty."""

    title: str
    text: str
    headings: tuple[str, ...]
    outlinks: tuple[str, ...]


def extract(
    body: bytes,
    url: str,
    declared_encoding: str | None = None,
    options: ExtractOptions = DEFAULT_OPTIONS,
) -> Extracted:
    """Extract title, visible text, h1-h3 headings and outlinks from a fetched page.

    ``url`` is the page's own (final) URL, used to resolve relative links unless the page has a
    ``<base href>``. ``declared_encoding`` is the HTTP ``charset`` (or a whole Content-Type
    value), if the response had one. Never raises on malformed bytes or markup.
    """
    _, html = decode_html(body, declared_encoding)
    page = walk_html(html, options.include_alt_text, options.respect_nofollow)
    links = [] if options.respect_nofollow and page.page_nofollow else page.links
    return Extracted(
        title=page.title or "",
        text=_assemble_lines(page.parts),
        headings=tuple(page.headings),
        outlinks=_outlinks(links, url, page.base_href, options.drop_params),
    )


# --- decoding ---------------------------------------------------------------------------------


def decode_html(body: bytes, declared_encoding: str | None = None) -> tuple[str, str]:
    """Decode a response body to ``(encoding, text)``, never raising.

    Order: a BOM; then UTF-8 if the bytes are valid non-ASCII UTF-8 (a random legacy-encoded
    page is practically never valid UTF-8, while mislabelled UTF-8 pages are common); then the
    declared (HTTP) and sniffed (``<meta charset>``) encodings that decode cleanly; then UTF-8
    with replacement if the bytes are mostly UTF-8; else the declared legacy encoding (or
    windows-1252, the web's default) with replacement characters.
    """
    bom_encoding, bom = read_bom(body)
    if bom_encoding is not None and bom is not None:
        return bom_encoding, to_unicode(body[len(bom) :], bom_encoding)
    if not body.isascii() and (text := _strict_decode(body, "utf-8")) is not None:
        return "utf-8", text
    candidates = _declared_encodings(body, declared_encoding)
    for encoding in candidates:
        if (text := _strict_decode(body, encoding)) is not None:
            return encoding, text
    if body.isascii() or _mostly_utf8(body):
        return "utf-8", body.decode("utf-8", "replace")
    fallback = next((enc for enc in candidates if enc != "utf-8"), "cp1252")
    return fallback, to_unicode(body, fallback)


def _declared_encodings(body: bytes, declared: str | None) -> list[str]:
    found = [_resolve_http_charset(declared), _resolve_meta_charset(body)]
    unique: list[str] = []
    for encoding in found:
        if encoding is not None and encoding not in unique and _is_text_codec(encoding):
            unique.append(encoding)
    return unique


def _resolve_http_charset(declared: str | None) -> str | None:
    if not declared:
        return None
    # Accept either a bare charset or a whole Content-Type header value.
    label = declared.lower().rpartition("charset=")[2].strip(" \t\"';")
    encoding = resolve_encoding(label) if label else None
    # The WHATWG "utf-16" label means little-endian when there is no BOM.
    return "utf-16-le" if encoding == "utf-16" else encoding


def _resolve_meta_charset(body: bytes) -> str | None:
    encoding = html_body_declared_encoding(body)
    # A meta tag readable as ASCII cannot be UTF-16/32: browsers treat that claim as UTF-8.
    if encoding is not None and encoding.startswith(("utf-16", "utf-32")):
        return "utf-8"
    return encoding


@lru_cache(maxsize=128)
def _is_text_codec(encoding: str) -> bool:
    # resolve_encoding() accepts any Python codec name, including bytes-to-bytes ones like
    # "base64", which bytes.decode() refuses with LookupError (but only for non-empty input).
    try:
        b"\x00".decode(encoding, "replace")
    except LookupError:
        return False
    return True


def _strict_decode(body: bytes, encoding: str) -> str | None:
    try:
        return body.decode(encoding)
    except UnicodeDecodeError:
        return None


def _mostly_utf8(body: bytes) -> bool:
    # Truncated or partly corrupted UTF-8 keeps most of its multi-byte characters intact, while
    # legacy single-byte text decoded as UTF-8 is nearly all errors.
    text = body.decode("utf-8", "replace")
    errors = text.count("\ufffd")
    return len(text) - len(text.encode("ascii", "ignore")) - errors > errors


# --- assembling the result --------------------------------------------------------------------

# Characters that render as nothing (soft hyphen, zero-width space, word joiner, BOM) but would
# split words for a tokenizer. ZWJ/ZWNJ stay: they change how emoji and some scripts render.
_INVISIBLE_CHARS = "\u00ad\u200b\u2060\ufeff"
_INVISIBLE = dict.fromkeys(map(ord, _INVISIBLE_CHARS))


def _assemble_lines(parts: list[str]) -> str:
    """Join text parts into lines: collapse spaces, strip, drop empty lines and empty cells."""
    text = "".join(parts)
    # translate() with a dict is slow per character, so only run it when it has work to do.
    if any(char in text for char in _INVISIBLE_CHARS):
        text = text.translate(_INVISIBLE)
    lines = []
    for raw in text.split("\n"):
        if "\t" in raw:
            cells = (" ".join(cell.split()) for cell in raw.split("\t"))
            line = "\t".join(cell for cell in cells if cell)
        else:
            line = " ".join(raw.split())
        if line:
            lines.append(line)
    return "\n".join(lines)


def _outlinks(
    hrefs: list[str], page_url: str, base_href: str | None, drop_params: frozenset[str]
) -> tuple[str, ...]:
    # A <base href> is resolved against the page URL; like browsers, ignore one that does not
    # give a usable http(s) URL (javascript:, data:, unparsable).
    base = resolve_links([base_href], page_url, drop_params) if base_href else []
    return tuple(resolve_links(hrefs, base[0] if base else page_url, drop_params))
