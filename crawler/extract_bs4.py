"""The BeautifulSoup implementation of :func:`crawler.extract.extract`, kept as a reference.

This is what the crawler used before the lxml event walk (:mod:`crawler._lxml_walk`): bs4 with
its lxml tree builder, then one iterative pass over the bs4 tree. Building the bs4 tree costs
several times the rest of the extraction, so the crawler no longer uses it; the equivalence tests
run both on every fixture and on generated markup and require equal results, and the benchmark
reports both. Decoding, line assembly and link resolution are shared with :mod:`crawler.extract`,
and so are the tag tables, so only the parsing and the walk differ.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field

from bs4 import BeautifulSoup, ParserRejectedMarkup, UnusualUsageWarning
from bs4.element import NavigableString, PageElement, RubyTextString, Tag

from crawler._lxml_walk import (
    BASE,
    BLOCK,
    BREAK,
    CELL,
    HEADING,
    HIDDEN,
    HIDDEN_STYLE,
    HIDING_ATTRS,
    IMG,
    INLINE,
    KINDS,
    LINK,
    PRE,
    RECORDED_KINDS,
    SKIP,
    TITLE,
    WHITESPACE,
)
from crawler.extract import (
    DEFAULT_OPTIONS,
    Extracted,
    ExtractOptions,
    _assemble_lines,
    _outlinks,
    decode_html,
)

logger = logging.getLogger(__name__)

__all__ = ["extract"]

# bs4's "this looks like XML / a URL" hints are advice for interactive use; in a crawler they are
# noise on every odd page.
warnings.filterwarnings("ignore", category=UnusualUsageWarning)


def extract(
    body: bytes,
    url: str,
    declared_encoding: str | None = None,
    options: ExtractOptions = DEFAULT_OPTIONS,
) -> Extracted:
    """Same contract and result as :func:`crawler.extract.extract`, parsed with BeautifulSoup."""
    _, html = decode_html(body, declared_encoding)
    walker = _Walker(options.include_alt_text, options.respect_nofollow)
    walker.walk(_parse(html))
    links = [] if options.respect_nofollow and walker.page_nofollow else walker.links
    return Extracted(
        title=walker.title or "",
        text=_assemble_lines(walker.parts),
        headings=tuple(walker.headings),
        outlinks=_outlinks(links, url, walker.base_href, options.drop_params),
    )


def _parse(html: str) -> BeautifulSoup:
    # Attribute values as plain strings: we only read href/rel/style/hidden, and it is cheaper.
    try:
        return BeautifulSoup(html, "lxml", multi_valued_attributes=None)
    except ParserRejectedMarkup:
        logger.debug("lxml rejected the markup; falling back to html.parser", exc_info=True)
        return BeautifulSoup(html, "html.parser", multi_valued_attributes=None)


# Exact types on purpose: Comment, Doctype, CData, Script, Stylesheet, TemplateString and the
# <rp> fallback parentheses are NavigableString subclasses that a person never sees.
_VISIBLE_STRINGS = frozenset((NavigableString, RubyTextString))


class _End:
    """Marker pushed on the walk stack; popping it closes an element whose children are done."""

    __slots__ = ("kind",)

    def __init__(self, kind: int) -> None:
        self.kind = kind


_END_HIDDEN = _End(HIDDEN)
_ENDS = {kind: _End(kind) for kind in (BLOCK, CELL, PRE, HEADING)}
_Item = PageElement | _End


@dataclass(slots=True)
class _Walker:
    """One depth-first pass collecting text parts, headings, title, base and link hrefs.

    Text parts are joined and split into lines at the end: "\n" parts mark block boundaries and
    "\t" parts table cells, so text nodes have their own newlines and tabs folded to spaces.
    """

    include_alt_text: bool
    respect_nofollow: bool
    parts: list[str] = field(default_factory=list)
    headings: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    title: str | None = None
    base_href: str | None = None
    page_nofollow: bool = False
    _hidden: int = 0  # > 0 while inside a hidden subtree
    _pre: int = 0  # > 0 while inside preformatted text
    _heading_starts: list[int] = field(default_factory=list)

    def walk(self, root: Tag) -> None:
        stack: list[_Item] = list(reversed(root.contents))
        parts = self.parts
        while stack:
            node = stack.pop()
            if isinstance(node, NavigableString):
                if type(node) in _VISIBLE_STRINGS and not self._hidden:
                    parts.append(self._fold(node))
            elif isinstance(node, _End):
                self._leave(node)
            elif isinstance(node, Tag):
                self._enter(node, stack)

    def _fold(self, text: str) -> str:
        if self._pre:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        elif "\n" in text:
            text = text.replace("\n", " ")
        return text.replace("\t", " ") if "\t" in text else text

    def _enter(self, tag: Tag, stack: list[_Item]) -> None:
        kind = KINDS.get(tag.name, INLINE)
        if kind == SKIP:
            return
        # Links, <title>, <base> and robots <meta> count even when hidden (a collapsed menu's
        # links are still links), so they are recorded before the visibility check.
        if kind in RECORDED_KINDS and not self._record(tag, kind):
            return
        if kind == HIDDEN or (not self._hidden and _is_hidden(tag)):
            self._hidden += 1
            stack.append(_END_HIDDEN)
        elif not self._hidden and kind != INLINE:
            self._open_visible(tag, kind, stack)
        stack.extend(reversed(tag.contents))

    def _record(self, tag: Tag, kind: int) -> bool:
        """Record a link, title, base or robots meta; return False to skip its children."""
        if kind == LINK:
            self._add_link(tag)
        elif kind == TITLE:
            if self.title is None:
                self.title = " ".join(tag.get_text().split())
            return False  # the title shows in the tab, not in the page text
        elif kind == BASE:
            if self.base_href is None:
                self.base_href = _attr(tag, "href")
        else:
            self._check_robots(tag)
        return True

    def _open_visible(self, tag: Tag, kind: int, stack: list[_Item]) -> None:
        if kind == BREAK:
            self.parts.append("\n")
        elif kind == IMG:
            alt = _attr(tag, "alt") if self.include_alt_text else None
            if alt:
                self.parts.append(" " + WHITESPACE.sub(" ", alt) + " ")
        elif kind in _ENDS:
            # The matching _End adds the closing separator, so the text of a block never runs
            # into what follows it.
            self.parts.append("\t" if kind == CELL else "\n")
            if kind == HEADING:
                self._heading_starts.append(len(self.parts))
            elif kind == PRE:
                self._pre += 1
            stack.append(_ENDS[kind])

    def _leave(self, end: _End) -> None:
        if end.kind == HIDDEN:
            self._hidden -= 1
            return
        self.parts.append("\t" if end.kind == CELL else "\n")
        if end.kind == PRE:
            self._pre -= 1
        elif end.kind == HEADING:
            start = self._heading_starts.pop()
            heading = " ".join("".join(self.parts[start:]).split())
            if heading:
                self.headings.append(heading)

    def _add_link(self, tag: Tag) -> None:
        href = _attr(tag, "href")
        if href is None:
            return
        if self.respect_nofollow:
            rel = _attr(tag, "rel")
            if rel is not None and "nofollow" in rel.lower().split():
                return
        self.links.append(href)

    def _check_robots(self, tag: Tag) -> None:
        if (_attr(tag, "name") or "").strip().lower() == "robots":
            directives = (_attr(tag, "content") or "").lower().replace(",", " ").split()
            if "nofollow" in directives or "none" in directives:
                self.page_nofollow = True


def _attr(tag: Tag, name: str) -> str | None:
    value = tag.attrs.get(name)
    # With multi_valued_attributes=None values are str; the list form only comes from callers
    # that parse differently, so join it back rather than trust the type.
    if value is None or isinstance(value, str):
        return value
    return " ".join(value)


def _is_hidden(tag: Tag) -> bool:
    attrs = tag.attrs
    if not attrs or not any(name in attrs for name in HIDING_ATTRS):
        return False  # the common case, decided without building any strings
    if "hidden" in attrs:
        return True
    aria = _attr(tag, "aria-hidden")
    if aria is not None and aria.strip().lower() == "true":
        return True
    style = _attr(tag, "style")
    return style is not None and HIDDEN_STYLE.search(style) is not None
