"""The fast page walk: visible text, h1-h3 headings, title, ``<base>`` and links, straight from
lxml's HTML parser events.

libxml2's HTML parser (through lxml) reports the document to a Python *target* as a stream of
events (start tag, text, end tag, comment...), and :class:`PageTarget` folds them into text parts
and links as they come: no tree is built and nothing recurses. Events rather than an lxml tree:

* libxml2's tree builder stops at 256 levels of nesting (2048 with ``huge_tree``) and silently
  drops the rest of the page, and broken pages with thousands of unclosed ``<div>``s exist. The
  event interface has no depth limit.
* It is the very event stream BeautifulSoup's lxml tree builder consumes, so this walk and the
  reference implementation (:mod:`crawler.extract_bs4`) see the same document structure. The
  handlers redo the little that bs4 adds on top of the events (adjacent text merged, whitespace-
  only strings collapsed outside ``<pre>``/``<textarea>``, ``<rp>`` text invisible) so that both
  give the same output; ``tests/unit/crawler/test_extract_equivalence.py`` checks it.

The tag tables and the hidden-style pattern are shared with the reference walk.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import cast

from lxml import etree

logger = logging.getLogger(__name__)

__all__ = ["PageTarget", "walk_html"]

# How the walk treats an element, looked up once per tag by name. Plain ints rather than an Enum:
# Enum hashing runs Python code, and this is the per-tag hot path.
INLINE = 0
SKIP = 1  # never rendered: neither text nor links are taken from inside
HIDDEN = 2  # not rendered as text, but links, <title> and <base> inside still count
BLOCK = 3
CELL = 4
PRE = 5
HEADING = 6
BREAK = 7
IMG = 8
LINK = 9
TITLE = 10
BASE = 11
META = 12

_BLOCK_TAGS = """address article aside blockquote body caption center dd details dialog dir div dl
    dt fieldset figcaption figure footer form frameset header h4 h5 h6 hgroup html legend li main
    menu nav ol optgroup option p search section summary table tbody tfoot thead tr ul"""
# audio/video/canvas/object/noembed hold fallback text, shown only when the media fails.
# script, style and template must stay here: bs4 gives their text string classes the reference
# walk ignores, and PageTarget relies on never entering them.
_SKIP_TAGS = "script style template svg iframe canvas object audio video noembed noframes datalist"
KINDS: dict[str, int] = {
    **dict.fromkeys(_BLOCK_TAGS.split(), BLOCK),
    **dict.fromkeys(_SKIP_TAGS.split(), SKIP),
    **dict.fromkeys(("head", "noscript"), HIDDEN),
    **dict.fromkeys(("td", "th"), CELL),
    **dict.fromkeys(("pre", "listing", "xmp", "plaintext", "textarea"), PRE),
    **dict.fromkeys(("h1", "h2", "h3"), HEADING),
    **dict.fromkeys(("br", "hr"), BREAK),
    **dict.fromkeys(("a", "area"), LINK),
    "img": IMG,
    "title": TITLE,
    "base": BASE,
    "meta": META,
}
RECORDED_KINDS = frozenset((LINK, TITLE, BASE, META))
HIDING_ATTRS = ("hidden", "aria-hidden", "style")
_HIDING_ATTR_SET = frozenset(HIDING_ATTRS)
WHITESPACE = re.compile(r"\s+")
HIDDEN_STYLE = re.compile(
    r"(?:^|[;\s])(?:display\s*:\s*none|visibility\s*:\s*(?:hidden|collapse))\s*"
    r"(?:!\s*important\s*)?(?:;|$)",
    re.IGNORECASE,
)

# What an element's end tag has to undo, as bit flags pushed per open element (0 for most).
_END_HIDDEN = 1
_END_PRESERVE = 2  # inside <pre>/<textarea>, where bs4 keeps whitespace-only strings as they are
_END_RUBY = 4  # <rt>/<rp>: bs4 gives the text inside its own string class
_END_LINE = 8
_END_CELL = 16
_END_PRE = 32
_END_HEADING = 64
_CLOSING = _END_LINE | _END_CELL | _END_PRE | _END_HEADING
_OPEN_FLAGS = {BLOCK: _END_LINE, CELL: _END_CELL, PRE: _END_PRE, HEADING: _END_HEADING}
_TAG_FLAGS = {"pre": _END_PRESERVE, "textarea": _END_PRESERVE, "rt": _END_RUBY, "rp": _END_RUBY}
# bs4's test for a whitespace-only string (str.isspace() also accepts Unicode spaces).
_ASCII_SPACES = " \n\t\x0c\r"


class PageTarget:
    """lxml parser target collecting text parts, headings, title, base and link hrefs.

    Text parts are joined and split into lines by the caller: "\\n" parts mark block boundaries
    and "\\t" parts table cells, so text nodes have their own newlines and tabs folded to spaces.
    """

    __slots__ = (
        "_data",
        "_ends",
        "_heading_starts",
        "_hidden",
        "_pre",
        "_preserve",
        "_ruby",
        "_skip",
        "_title_parts",
        "base_href",
        "headings",
        "include_alt_text",
        "links",
        "page_nofollow",
        "parts",
        "respect_nofollow",
        "title",
    )

    def __init__(self, include_alt_text: bool, respect_nofollow: bool) -> None:
        self.include_alt_text = include_alt_text
        self.respect_nofollow = respect_nofollow
        self.parts: list[str] = []
        self.headings: list[str] = []
        self.links: list[str] = []
        self.title: str | None = None
        self.base_href: str | None = None
        self.page_nofollow = False
        self._data: list[str] = []  # text chunks since the last tag, joined as bs4 joins them
        self._ends: list[int] = []  # _END_* flags of each open element outside skipped ones
        self._skip = 0  # depth inside a skipped element (or the <title>), 0 outside
        self._title_parts: list[str] | None = None  # set while reading the first <title>
        self._hidden = 0  # > 0 while inside a hidden subtree
        self._pre = 0  # > 0 while inside visible preformatted text
        self._preserve = 0  # open <pre>/<textarea> elements
        self._ruby: list[str] = []  # open <rt>/<rp> elements, innermost last
        self._heading_starts: list[int] = []

    # --- the lxml target interface ---------------------------------------------------------

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        if self._data:
            self._flush()
        if self._skip:
            self._skip += 1
            return
        kind = KINDS.get(tag, INLINE)
        if kind in (SKIP, TITLE):
            # The title shows in the tab, not in the page text: skipped like a script, but the
            # first one's text is collected on the side.
            self._skip = 1
            if kind == TITLE and self.title is None:
                self._title_parts = []
            return
        end = _TAG_FLAGS.get(tag, 0)
        if end:
            self._open_special(tag, end)
        # Links, <base> and robots <meta> count even when hidden (a collapsed menu's links are
        # still links), so they are recorded before the visibility check.
        if kind in RECORDED_KINDS:
            self._record(kind, attrib)
        if kind == HIDDEN or (not self._hidden and attrib and is_hidden(attrib)):
            self._hidden += 1
            end |= _END_HIDDEN
        elif not self._hidden and kind != INLINE:
            end |= self._open_visible(kind, attrib)
        self._ends.append(end)

    def end(self, tag: str) -> None:
        if self._data:
            self._flush()
        if self._skip:
            self._skip -= 1
            if not self._skip and self._title_parts is not None:
                self.title = " ".join("".join(self._title_parts).split())
                self._title_parts = None
        elif self._ends:  # always true: libxml2 balances its events
            end = self._ends.pop()
            if end:
                self._leave(end)

    def data(self, data: str) -> None:
        self._data.append(data)

    def comment(self, text: str) -> None:
        # Comments, processing instructions and doctypes are never shown, but like bs4 they end
        # the text before them: " <!---->x" is two strings, and the first is whitespace-only.
        if self._data:
            self._flush()

    def pi(self, target: str, data: str) -> None:
        if self._data:
            self._flush()

    def doctype(self, name: str | None, pubid: str | None, system: str | None) -> None:
        if self._data:
            self._flush()

    def close(self) -> None:
        if self._data:
            self._flush()

    # --- text --------------------------------------------------------------------------------

    def _flush(self) -> None:
        data = self._data
        text = data[0] if len(data) == 1 else "".join(data)
        data.clear()
        if self._skip:
            # bs4's get_text() of the title leaves out <rt>/<rp> string classes.
            if self._title_parts is not None and not self._ruby:
                self._title_parts.append(text)
            return
        if self._hidden or (self._ruby and self._ruby[-1] == "rp"):
            return  # <rp> holds the parentheses shown only where ruby is not supported
        if not self._preserve and not text.strip(_ASCII_SPACES):
            text = "\n" if "\n" in text else " "  # what bs4 makes of whitespace-only strings
        self.parts.append(self._fold(text))

    def _fold(self, text: str) -> str:
        if self._pre:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        elif "\n" in text:
            text = text.replace("\n", " ")
        return text.replace("\t", " ") if "\t" in text else text

    # --- elements ----------------------------------------------------------------------------

    def _open_special(self, tag: str, end: int) -> None:
        if end == _END_PRESERVE:
            self._preserve += 1
        else:
            self._ruby.append(tag)

    def _record(self, kind: int, attrib: Mapping[str, str]) -> None:
        if kind == LINK:
            self._add_link(attrib)
        elif kind == BASE:
            if self.base_href is None:
                self.base_href = attrib.get("href")
        else:
            self._check_robots(attrib)

    def _open_visible(self, kind: int, attrib: Mapping[str, str]) -> int:
        """Emit what an element shows where it starts; return the flags for its end tag."""
        if kind == BREAK:
            self.parts.append("\n")
        elif kind == IMG:
            alt = attrib.get("alt") if self.include_alt_text else None
            if alt:
                self.parts.append(" " + WHITESPACE.sub(" ", alt) + " ")
        elif kind in _OPEN_FLAGS:
            # The end tag adds the closing separator, so the text of a block never runs into
            # what follows it.
            self.parts.append("\t" if kind == CELL else "\n")
            if kind == HEADING:
                self._heading_starts.append(len(self.parts))
            elif kind == PRE:
                self._pre += 1
            return _OPEN_FLAGS[kind]
        return 0

    def _leave(self, end: int) -> None:
        if end & _END_HIDDEN:
            self._hidden -= 1
        if end & _END_PRESERVE:
            self._preserve -= 1
        if end & _END_RUBY:
            self._ruby.pop()
        if end & _CLOSING:
            self._close_block(end)

    def _close_block(self, end: int) -> None:
        self.parts.append("\t" if end & _END_CELL else "\n")
        if end & _END_PRE:
            self._pre -= 1
        elif end & _END_HEADING:
            start = self._heading_starts.pop()
            heading = " ".join("".join(self.parts[start:]).split())
            if heading:
                self.headings.append(heading)

    def _add_link(self, attrib: Mapping[str, str]) -> None:
        href = attrib.get("href")
        if href is None:
            return
        if self.respect_nofollow:
            rel = attrib.get("rel")
            if rel is not None and "nofollow" in rel.lower().split():
                return
        self.links.append(href)

    def _check_robots(self, attrib: Mapping[str, str]) -> None:
        if (attrib.get("name") or "").strip().lower() == "robots":
            directives = (attrib.get("content") or "").lower().replace(",", " ").split()
            if "nofollow" in directives or "none" in directives:
                self.page_nofollow = True


def is_hidden(attrs: Mapping[str, str]) -> bool:
    """Whether an element's own attributes hide it (``hidden``, ``aria-hidden``, inline CSS)."""
    if _HIDING_ATTR_SET.isdisjoint(attrs):
        return False  # the common case, decided in C without building any strings
    if "hidden" in attrs:
        return True
    aria = attrs.get("aria-hidden")
    if aria is not None and aria.strip().lower() == "true":
        return True
    style = attrs.get("style")
    return style is not None and HIDDEN_STYLE.search(style) is not None


# --- parsing ----------------------------------------------------------------------------------

# What makes lxml give up on a document. bs4 retries such a document as UTF-8 bytes, and so do
# we; UnicodeEncodeError (lone surrogates, which libxml2 cannot take as text) is included
# because the bytes retry replaces them, where bs4 would raise.
_REJECTED = (UnicodeError, LookupError, etree.LxmlError)


def walk_html(html: str, include_alt_text: bool, respect_nofollow: bool) -> PageTarget:
    """Parse ``html`` and return the :class:`PageTarget` holding what it collected.

    Never raises: markup lxml rejects even as UTF-8 bytes (never seen with lxml 6, whose HTML
    parser accepts any text) yields an empty result.
    """
    # bs4 drops a leading BOM before handing text to lxml (lxml bug 1948551); so do we.
    html = html.removeprefix("\ufeff")
    target = _feed(html, None, include_alt_text, respect_nofollow)
    if target is None:
        target = _feed(html.encode("utf-8", "replace"), "utf8", include_alt_text, respect_nofollow)
    if target is None:
        logger.warning("lxml rejected a %d-character page; extracting nothing", len(html))
        target = PageTarget(include_alt_text, respect_nofollow)
    return target


def _feed(
    markup: str | bytes, encoding: str | None, include_alt_text: bool, respect_nofollow: bool
) -> PageTarget | None:
    target = PageTarget(include_alt_text, respect_nofollow)
    # The same parser settings bs4's lxml tree builder uses, so both see the same events. The
    # stub types target methods as taking str | bytes; in HTML mode lxml only passes str.
    parser = etree.HTMLParser(
        target=cast("etree.ParserTarget", target), recover=True, huge_tree=False, encoding=encoding
    )
    try:
        parser.feed(markup)
        parser.close()
    except _REJECTED:
        logger.debug("lxml rejected the markup (encoding %s)", encoding, exc_info=True)
        return None
    return target
