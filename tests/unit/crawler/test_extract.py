"""Tests for crawler.extract: golden outputs for the fixture pages, encodings, options, huge and
deep pages, and properties (never raises, normalised output)."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler._lxml_walk import walk_html
from crawler.extract import Extracted, ExtractOptions, decode_html, extract
from tests.support.paths import FIXTURES

FIXTURES = FIXTURES / "html"
PAGE_URL = "http://example.com/dir/page.html"


def _lines(*lines: str) -> str:
    return "\n".join(lines)


GOLDEN: dict[str, Extracted] = {
    "article.html": Extracted(
        title="Council approves new energy plan | Example News",
        text=_lines(
            "Example News",
            "News",
            "Sport",
            "Shop",
            "Council approves new energy plan",
            "By Jane Doe, 1 May 2024",
            "The city council voted 9 to 2 on Tuesday to approve the plan, which sets out how the"
            " city will cut its emissions by half before 2035.",
            "What changes",
            "Street lights will be replaced,",
            "buses will run on electricity, and new buildings must have solar panels.",
            '"It is a good day for the city," said the mayor.',
            "Costs",
            "Lights: 2 million",
            "Buses: 10 million",
            "Not a fingerprint heading",
            "Read the full plan.",
            "\u00a9 2024 Example News \u00b7 About us",
        ),
        headings=("Council approves new energy plan", "What changes", "Costs"),
        outlinks=(
            "http://example.com/",
            "http://example.com/news",
            "http://example.com/sport",
            "https://shop.example.com/",
            "http://example.com/authors/jane-doe",
            "http://example.com/docs/plan.pdf",
            "http://example.com/about",
        ),
    ),
    "tables.html": Extracted(
        title="League table",
        text=_lines(
            "Standings",
            "Premier division, week 12",
            "Team\tPlayed\tPoints",
            "Rovers\t12\t30",
            "United FC\t27",
            "City\t12\t25",
            "Outer",
            "inner a\tinner b",
            "outer end",
            "After the tables.",
        ),
        headings=("Standings",),
        outlinks=(),
    ),
    "pre_blocks.html": Extracted(
        title="Code sample",
        text=_lines(
            "Install it with:",
            "$ pip install neardup",
            "$ neardup --help",
            "A function:",
            "def add(a, b):",
            "# two spaces here",
            "return a + b",
            "Inline code stays inline text.",
            "tab separated values",
        ),
        headings=(),
        outlinks=(),
    ),
    "entities.html": Extracted(
        title='Fish & Chips \u2013 "menu"',
        text=_lines(
            "Caf\u00e9 & bar open \u2014 7 days",
            "Snowman: \u2603 Euro: \u20ac5 Copyright: \u00a9 2024",
            "<script>alert(1)</script> is shown as text",
            "A\ufffdB and an unknown &bogus; entity and a bare & ampersand &",
            "Zerowidth and softhyphen",
        ),
        headings=(),
        outlinks=(),
    ),
    "hidden.html": Extracted(
        title="Hidden parts",
        text=_lines(
            "Visible one.",
            "Aria false is visible.",
            "Not really hidden.",
            "Not hidden either.",
            "Visible two with inline hidden.",
            "Visible three.",
        ),
        headings=(),
        # a link in a hidden menu is still a link
        outlinks=("http://example.com/menu/hidden-attr",),
    ),
    "malformed.html": Extracted(
        title="Broken <b>page",
        text=_lines(
            "Unclosed paragraph",
            "Second paragraph with bold and italic text",
            "stray closing tags above",
            "one",
            "two",
            "three",
            "Attribute soup link text after.",
            "Less-than < sign and 5 > 3 and a & b.",
            "cell one\tcell two",
            "<",
            "Unclosed div at end",
            "Last words",
        ),
        headings=(),
        outlinks=("http://example.com/x",),
    ),
    "scripts_only.html": Extracted(title="", text="", headings=(), outlinks=()),
    "links.html": Extracted(
        title="Links",
        text=(
            "relative parent with query tracking protocol relative absolute whitespace session"
            " mail js phone data ftp in-page empty no href duplicate of the first nofollow broken"
            " ipv6 non-ascii"
        ),
        headings=(),
        outlinks=(
            "https://example.com/base/dir/page.html",
            "https://example.com/base/up.html?a=1&b=2",
            "https://example.com/root?id=7&s=search+term",
            "https://cdn.example.org/lib.js",
            "http://other.example.org/Path/~user/",
            "https://example.com/spaced",
            "https://example.com/app?x=1",
            "https://example.com/caf%C3%A9?q=%C3%A9t%C3%A9",
            "https://example.com/area-target",
            "https://example.com/hidden-menu",
        ),
    ),
    "windows1252.html": Extracted(
        title="Caf\u00e9 \u201cNo\u00ebl\u201d",
        text=_lines(
            "Cr\u00e8me br\u00fbl\u00e9e \u2013 \u20ac4,50",
            "\u00abBonjour\u00bb, dit l\u2019ma\u00eetre d\u2019h\u00f4tel. Stra\u00dfe, "
            "\u00e6\u00f8\u00e5.",
        ),
        headings=("Cr\u00e8me br\u00fbl\u00e9e \u2013 \u20ac4,50",),
        outlinks=(),
    ),
    "shift_jis.html": Extracted(
        title="日本語のページ",
        text=_lines("ニュース", "今日は良い天気です。表示・能力・ソフト"),
        headings=("ニュース",),
        outlinks=(),
    ),
    # The meta says UTF-8 but the bytes are windows-1252.
    "wrong_charset.html": Extracted(
        title="R\u00e9sum\u00e9",
        text="Na\u00efve caf\u00e9 \u2014 \u201cquoted\u201d \u00bd price.",
        headings=(),
        outlinks=(),
    ),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_fixture_matches_golden(name: str) -> None:
    assert extract((FIXTURES / name).read_bytes(), PAGE_URL) == GOLDEN[name]


def test_every_fixture_has_a_golden() -> None:
    assert sorted(path.name for path in FIXTURES.glob("*.html")) == sorted(GOLDEN)


# --- encodings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "declared"),
    [
        ("windows1252.html", "utf-8"),  # wrong header: the bytes are not UTF-8, the meta wins
        ("windows1252.html", "text/html; Charset=Windows-1252"),
        ("windows1252.html", "x-no-such-charset"),
        ("windows1252.html", "base64"),  # a Python codec, but not a text encoding
        ("shift_jis.html", "Shift_JIS"),
        ("wrong_charset.html", "utf-8"),
    ],
)
def test_declared_encoding_variants(name: str, declared: str) -> None:
    assert extract((FIXTURES / name).read_bytes(), PAGE_URL, declared) == GOLDEN[name]


def test_http_charset_is_used_without_meta() -> None:
    body = "<p>\u65e5\u672c\u8a9e\u3067\u3059\u3002</p>".encode("shift_jis")
    assert extract(body, PAGE_URL, "shift_jis").text == "\u65e5\u672c\u8a9e\u3067\u3059\u3002"


def test_valid_utf8_wins_over_a_wrong_legacy_declaration() -> None:
    body = '<meta charset="iso-8859-1"><p>caf\u00e9 \u2014 na\u00efve</p>'.encode()
    assert extract(body, PAGE_URL, "ISO-8859-1").text == "caf\u00e9 \u2014 na\u00efve"


@pytest.mark.parametrize(
    ("body", "declared", "expected"),
    [
        (b"\xff\xfe" + "<p>h\u00e9llo</p>".encode("utf-16-le"), None, "utf-16-le"),
        (b"\xfe\xff" + "<p>h\u00e9llo</p>".encode("utf-16-be"), "cp1252", "utf-16-be"),
        (b"\xef\xbb\xbf<p>h\xc3\xa9llo</p>", "cp1252", "utf-8"),
    ],
)
def test_bom_wins(body: bytes, declared: str | None, expected: str) -> None:
    assert decode_html(body, declared)[0] == expected
    assert extract(body, PAGE_URL, declared).text == "h\u00e9llo"


def test_broken_utf8_is_replaced_not_misdecoded() -> None:
    body = "<p>na\u00efve caf\u00e9 \u00fcber</p>".encode() + b"<p>cut \xe2\x82 off \xff</p>"
    assert decode_html(body)[0] == "utf-8"
    assert extract(body, PAGE_URL).text == "na\u00efve caf\u00e9 \u00fcber\ncut \ufffd off \ufffd"


def test_undeclared_legacy_bytes_fall_back_to_windows_1252() -> None:
    assert extract(b"<p>caf\xe9 \x80 5</p>", PAGE_URL) == Extracted(
        title="", text="caf\u00e9 \u20ac 5", headings=(), outlinks=()
    )


# --- structure and options --------------------------------------------------------------------


def test_alt_text_is_opt_in() -> None:
    body = b'<p>A <img src="x.png" alt=" red\n kite "> flies.</p><img alt="">'
    assert extract(body, PAGE_URL).text == "A flies."
    with_alt = extract(body, PAGE_URL, options=ExtractOptions(include_alt_text=True))
    assert with_alt.text == "A red kite flies."


def test_nofollow_links_are_kept_in_document_order_when_not_respected() -> None:
    body = b'<a href="/a">a</a><a rel="nofollow" href="/b">b</a><a href="/c">c</a>'
    assert extract(body, PAGE_URL).outlinks == ("http://example.com/a", "http://example.com/c")
    options = ExtractOptions(respect_nofollow=False)
    assert extract(body, PAGE_URL, options=options).outlinks == (
        "http://example.com/a",
        "http://example.com/b",
        "http://example.com/c",
    )


@pytest.mark.parametrize("content", ["noindex, NOFOLLOW", "none"])
def test_meta_robots_nofollow_drops_all_links(content: str) -> None:
    body = f'<meta name="Robots" content="{content}"><a href="/a">a</a>'.encode()
    assert extract(body, PAGE_URL).outlinks == ()
    options = ExtractOptions(respect_nofollow=False)
    assert extract(body, PAGE_URL, options=options).outlinks == ("http://example.com/a",)


def test_custom_drop_params() -> None:
    body = b'<a href="/x?utm_source=a&amp;ref=b&amp;k=1">x</a>'
    options = ExtractOptions(drop_params=frozenset({"ref"}))
    assert extract(body, PAGE_URL, options=options).outlinks == (
        "http://example.com/x?k=1&utm_source=a",
    )


def test_headings_are_h1_to_h3_visible_and_normalised() -> None:
    body = (
        b"<h1> One <em>big</em>\n title </h1><h2 hidden>Hidden</h2><h3>Three<br>lines</h3>"
        b"<h4>Four</h4><h2>  </h2><div style='display:none'><h1>Gone</h1></div>"
    )
    result = extract(body, PAGE_URL)
    assert result.headings == ("One big title", "Three lines")
    assert result.text == "One big title\nThree\nlines\nFour"


def test_title_is_the_first_title_and_not_page_text() -> None:
    body = b"<svg><title>icon</title></svg><title> First </title><p>Body</p><title>Second</title>"
    assert extract(body, PAGE_URL) == Extracted(
        title="First", text="Body", headings=(), outlinks=()
    )


def test_unusable_base_href_is_ignored() -> None:
    body = b'<base href="javascript:alert(1)"><a href="x">x</a>'
    assert extract(body, PAGE_URL).outlinks == ("http://example.com/dir/x",)


@pytest.mark.parametrize("page_url", ["", "not a url", "http://[::1", "ftp://example.com/x"])
def test_unusable_page_url_keeps_only_absolute_links(page_url: str) -> None:
    body = b'<a href="/a">a</a><a href="b">b</a><a href="https://ok.example/">c</a>'
    assert extract(body, page_url).outlinks == ("https://ok.example/",)


def test_ruby_annotations_keep_rt_and_drop_rp() -> None:
    body = "<p><ruby>漢<rp>(</rp><rt>kan</rt><rp>)</rp></ruby>字</p>".encode()
    assert extract(body, PAGE_URL).text == "漢kan字"


def test_pre_keeps_line_breaks_of_any_style() -> None:
    body = b"<pre>one\r\ntwo\rthree\n\n  four  five</pre><p>a\nb</p>"
    assert extract(body, PAGE_URL).text == "one\ntwo\nthree\nfour five\na b"


def test_inline_elements_do_not_split_words_or_lines() -> None:
    body = b"<p>ab<b>cd</b><span>ef</span> <i>gh</i></p><div>x</div>y<li>z</li>"
    assert extract(body, PAGE_URL).text == "abcdef gh\nx\ny\nz"


# --- size and shape ---------------------------------------------------------------------------


def _huge_page(target_bytes: int) -> bytes:
    row = (
        "<div class='item'><h3>Item {i}</h3><p>Some <b>text</b> about item {i}, with a "
        "<a href='/item/{i}?utm_source=list'>link</a> and &amp; an entity.</p></div>\n"
    )
    rows = []
    size = 0
    i = 0
    while size < target_bytes:
        rows.append(row.format(i=i))
        size += len(rows[-1])
        i += 1
    return ("<html><body>" + "".join(rows) + "<p>THE END</p></body></html>").encode()


def test_huge_page_extracts_in_reasonable_time() -> None:
    body = _huge_page(5 * 1024 * 1024)
    start = time.perf_counter()
    result = extract(body, PAGE_URL)
    elapsed = time.perf_counter() - start
    assert result.text.endswith("link and & an entity.\nTHE END")
    assert len(result.outlinks) == result.text.count("\nItem ") + 1
    assert result.outlinks[-1].endswith(f"/item/{len(result.outlinks) - 1}")
    assert elapsed < 60, f"5 MB page took {elapsed:.1f}s"


def test_deeply_nested_and_giant_text_pages() -> None:
    deep = b"<div>" * 50_000 + b"<p>bottom</p>" + b"</div>" * 50_000
    assert extract(deep, PAGE_URL).text == "bottom"
    giant = b"<p>" + b"word " * 1_000_000 + b"</p>"
    assert extract(giant, PAGE_URL).text == " ".join(["word"] * 1_000_000)


def test_nesting_deeper_than_libxml2_tree_limit_keeps_the_rest_of_the_page() -> None:
    # libxml2's tree builder gives up at depth 256 (2048 with huge_tree); the event walk has no
    # such limit.
    deep = b"<div>" * 3000 + b"<h2>deep</h2>" + b"</div>" * 3000 + b"<p>after</p>"
    assert extract(deep, PAGE_URL) == Extracted(
        title="", text="deep\nafter", headings=("deep",), outlinks=()
    )


@pytest.mark.parametrize(
    "body",
    [b"", b" \n\t ", b"<!-- only -->", b"<!DOCTYPE html>", b"<?php ?>", b"</p>", b"\xef\xbb\xbf"],
)
def test_documents_without_elements_give_an_empty_result(body: bytes) -> None:
    assert extract(body, PAGE_URL) == Extracted(title="", text="", headings=(), outlinks=())


def test_lone_surrogates_do_not_reach_libxml2() -> None:
    # No codec decode_html picks produces them, but a str with one cannot be encoded for lxml;
    # the walk retries with the surrogate replaced instead of raising.
    page = walk_html("<title>t\ud800</title><p>a\udfffb</p>", False, True)
    assert (page.title, "".join(page.parts).split()) == ("t?", ["a?b"])


# --- properties -------------------------------------------------------------------------------

_ENCODINGS = [None, "utf-8", "cp1252", "shift_jis", "utf-16", "gb2312", "bogus", "base64"]
_TAGS = ["p", "div", "b", "a", "pre", "td", "tr", "table", "h1", "h2", "br", "script", "style"]
_TAGS += ["noscript", "template", "svg", "head", "title", "base", "meta", "img", "li", "span"]
_ATTRS = [
    "",
    " hidden",
    " aria-hidden=true",
    ' style="display:none"',
    ' href="/x?utm_source=1#f"',
    " href='javascript:x'",
    ' rel="nofollow" href=y',
    " alt='pic'",
    ' name="robots" content="nofollow"',
    " href='http://[::1'",
]
_html_tokens = st.one_of(
    st.builds(lambda t, a: f"<{t}{a}>", st.sampled_from(_TAGS), st.sampled_from(_ATTRS)),
    st.builds(lambda t: f"</{t}>", st.sampled_from(_TAGS)),
    st.sampled_from(["<!--", "-->", "&amp;", "&#0;", "&nbsp;", "\n", "\t", "\r", " ", "<", "&"]),
    st.text(max_size=10),
)
_html = st.lists(_html_tokens, max_size=40).map("".join)
_options = st.builds(ExtractOptions, st.booleans(), st.booleans())


def _assert_normalised(result: Extracted) -> None:
    for line in result.text.split("\n") if result.text else []:
        assert line and line == line.strip() and "  " not in line
        assert all(cell and cell == cell.strip() for cell in line.split("\t"))
    assert all(h and h == " ".join(h.split()) for h in result.headings)
    assert result.title == " ".join(result.title.split())
    assert len(set(result.outlinks)) == len(result.outlinks)
    assert all(link.startswith(("http://", "https://")) for link in result.outlinks)
    assert not any("#" in link for link in result.outlinks)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000), st.sampled_from(_ENCODINGS), _options)
def test_extract_never_raises_on_arbitrary_bytes(
    body: bytes, declared: str | None, options: ExtractOptions
) -> None:
    _assert_normalised(extract(body, PAGE_URL, declared, options))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_html, st.sampled_from(["utf-8", "cp1252", "utf-16-le"]), _options)
def test_extract_never_raises_on_tag_soup(
    html: str, encoding: str, options: ExtractOptions
) -> None:
    body = html.encode(encoding, "replace")
    _assert_normalised(extract(body, PAGE_URL, None, options))
