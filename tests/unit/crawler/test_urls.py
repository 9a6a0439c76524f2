"""Tests for crawler.urls: canonicalisation, host extraction and link resolution."""

from __future__ import annotations

from urllib.parse import unquote_plus, urlsplit

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crawler import urls
from crawler.urls import DEFAULT_DROP_PARAMS, canonicalize_url, host_of, resolve_links


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("HTTP://WWW.Example.COM/a", "http://www.example.com/a"),
        ("http://example.com", "http://example.com/"),
        ("http://example.com:80/x", "http://example.com/x"),
        ("https://example.com:443/x", "https://example.com/x"),
        ("https://example.com:0443/x", "https://example.com/x"),
        ("http://example.com:443/x", "http://example.com:443/x"),
        ("https://example.com:8443/x", "https://example.com:8443/x"),
        ("http://example.com./x", "http://example.com/x"),
        ("http://example.com/a#frag", "http://example.com/a"),
        ("http://example.com/a?#", "http://example.com/a"),
        ("http://example.com/a?c=3&b=2&a=1&b=1", "http://example.com/a?a=1&b=1&b=2&c=3"),
        ("http://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/%7euser/%2f%41", "http://example.com/~user/%2FA"),
        ("http://example.com/r\u00e9sum\u00e9 x", "http://example.com/r%C3%A9sum%C3%A9%20x"),
        ("http://example.com/?q=caf%c3%a9+au+lait", "http://example.com/?q=caf%C3%A9+au+lait"),
        ("http://m\u00fcller.example/", "http://xn--mller-kva.example/"),
        ("http://[::0:1]:80/", "http://[::1]/"),
        ("  http://example.com/a\tb\n  ", "http://example.com/ab"),
        # tracking and session parameters, in any case and spelling
        (
            "http://example.com/?utm_source=a&UTM_Medium=b&utm%5Fcampaign=c&x=1",
            "http://example.com/?x=1",
        ),
        ("http://example.com/?gclid=1&fbclid=2&msclkid=3&_ga=4&yclid=5", "http://example.com/"),
        ("http://example.com/?mc_cid=1&mc_eid=2&ref_src=twsrc&id=9", "http://example.com/?id=9"),
        ("http://example.com/?PHPSESSID=a&sid=b&sessionid=c&session_id=d", "http://example.com/"),
        ("http://example.com/?ASPSESSIONIDQQGGQ=abc&page=2", "http://example.com/?page=2"),
        ("http://example.com/p;jsessionid=A1B2?x=1", "http://example.com/p?x=1"),
        ("http://example.com/p;JSESSIONID=A1B2;v=2/q", "http://example.com/p;v=2/q"),
        # "s" is usually a search query: kept
        ("http://example.com/?s=near+duplicate", "http://example.com/?s=near+duplicate"),
        ("mailto:Desk@Example.com", "mailto:Desk@Example.com"),
    ],
)
def test_canonicalize_url(url: str, expected: str) -> None:
    assert canonicalize_url(url) == expected


def test_canonicalize_url_custom_drop_params() -> None:
    url = "http://example.com/?utm_source=a&ref=b&REFERRER=c&x=1"
    assert canonicalize_url(url, drop_params=["ref*"]) == "http://example.com/?utm_source=a&x=1"
    assert canonicalize_url(url, drop_params=()) == (
        "http://example.com/?REFERRER=c&ref=b&utm_source=a&x=1"
    )


@pytest.mark.parametrize("url", ["http://[::1/x", "http://example.com:port/"])
def test_canonicalize_url_rejects_unparsable(url: str) -> None:
    with pytest.raises(ValueError):
        canonicalize_url(url)


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://WWW.Example.com:8080/a?b#c", "www.example.com"),
        ("http://user:pw@example.com./", "example.com"),
        ("http://m\u00fcller.example/", "xn--mller-kva.example"),
        ("http://[2001:DB8::1]:80/", "2001:db8::1"),
        ("mailto:someone@example.com", ""),
        ("/relative/path", ""),
        ("http://[::1/", ""),
        ("", ""),
    ],
)
def test_host_of(url: str, host: str) -> None:
    assert host_of(url) == host


def test_resolve_links_filters_dedupes_and_keeps_order() -> None:
    hrefs = [
        "b.html",
        "/a.html#x",
        "mailto:x@example.com",
        "javascript:void(0)",
        "tel:+1555",
        "data:text/plain,hi",
        "#top",
        "",
        "   ",
        "b.html#again",
        "//Other.example/",
        "http:///no-host",
        "http://[::1",
        "HTTPS://example.com:443/a.html",
    ]
    assert resolve_links(hrefs, "https://example.com/dir/page") == [
        "https://example.com/dir/b.html",
        "https://example.com/a.html",
        "https://other.example/",
    ]


def test_resolve_links_against_a_non_http_base_still_takes_absolute_links() -> None:
    assert resolve_links(["/x", "http://a.example/y"], "about:blank") == ["http://a.example/y"]


# --- properties -------------------------------------------------------------------------------

_NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.~"
_DROPPED_NAMES = ["utm_source", "UTM_Medium", "utm%5Fterm", "gclid", "Fbclid", "sid", "PHPSESSID"]
_DROPPED_NAMES += ["jsessionid", "aspsessionidABC", "_ga", "session_id", "%73id", "utm_"]
_names = st.one_of(
    st.sampled_from(_DROPPED_NAMES),
    st.text(_NAME_CHARS, max_size=8),
    st.text(max_size=6),
)
_values = st.one_of(st.text(_NAME_CHARS, max_size=8), st.text(max_size=8))
_segment = st.one_of(
    st.text(_NAME_CHARS, max_size=10),
    st.sampled_from([".", "..", "%2e", "%7E", "%2F", "%zz", "a b", "caf\u00e9", ";jsessionid=A"]),
    st.text(max_size=6),
)
_label = st.one_of(
    st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,10}[a-zA-Z0-9])?", fullmatch=True),
    st.sampled_from(["m\u00fcller", "xn--mller-kva", "EXAMPLE"]),
)


@st.composite
def _urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "Https"]))
    host = ".".join(draw(st.lists(_label, min_size=1, max_size=3)))
    host += draw(st.sampled_from(["", "", "."]))
    port = draw(st.sampled_from(["", "", ":80", ":443", ":8080", ":0080"]))
    path = "/".join(draw(st.lists(_segment, max_size=4)))
    pairs = draw(st.lists(st.tuples(_names, _values), max_size=5))
    query = "&".join(f"{name}={value}" for name, value in pairs)
    fragment = draw(st.sampled_from(["", "#", "#frag", "#a?b=c"]))
    return f"{scheme}://{host}{port}/{path}" + (f"?{query}" if pairs else "") + fragment


def _canonical_or_none(url: str) -> str | None:
    try:
        return canonicalize_url(url)
    except ValueError:
        return None


@settings(max_examples=300)
@given(st.one_of(_urls(), st.text(max_size=40)))
@example("http://example.com/a/../../b?%75tm_source=1#x")
def test_canonicalize_url_is_idempotent(url: str) -> None:
    canonical = _canonical_or_none(url)
    if canonical is not None:
        assert canonicalize_url(canonical) == canonical


@settings(max_examples=300)
@given(_urls())
def test_fragments_never_survive(url: str) -> None:
    canonical = _canonical_or_none(url)
    if canonical is not None:
        assert "#" not in canonical


def _is_dropped(name: str) -> bool:
    name = unquote_plus(name).lower()
    exact = {n for n in DEFAULT_DROP_PARAMS if not n.endswith("*")}
    prefixes = tuple(n[:-1] for n in DEFAULT_DROP_PARAMS if n.endswith("*"))
    return name in exact or name.startswith(prefixes)


@settings(max_examples=300)
@given(_urls())
def test_dropped_params_never_survive(url: str) -> None:
    canonical = _canonical_or_none(url)
    if canonical is None:
        return
    parts = urlsplit(canonical)
    names = [pair.partition("=")[0] for pair in parts.query.split("&") if pair]
    assert not any(_is_dropped(name) for name in names)
    path_params = [seg.partition("=")[0] for seg in parts.path.split(";")[1:]]
    assert not any(_is_dropped(name) for name in path_params)


_plain_urls = st.from_regex(
    r"https?://[a-zA-Z0-9-]{1,8}(\.[a-zA-Z0-9-]{1,8}){0,2}(:[1-9][0-9]{0,4})?"
    r"(/[a-zA-Z0-9._~!$&'()*+,=:@-]{0,6}){0,3}(\?[a-zA-Z0-9._~=&-]{0,12})?(#[ -~]{0,4})?",
    fullmatch=True,
)


@settings(max_examples=500)
@given(_plain_urls)
@example("http://a.example/x?b=2&a=&c&&=v")
def test_fast_path_agrees_with_w3lib(url: str) -> None:
    matches = urls._param_matcher(DEFAULT_DROP_PARAMS)
    fast = urls._fast_canonical(url, matches)
    if fast is not None:
        assert fast == urls._full_canonical(url, matches)


@settings(max_examples=200)
@given(st.lists(st.one_of(_urls(), st.text(max_size=20)), max_size=5))
def test_resolved_links_are_canonical_http(hrefs: list[str]) -> None:
    for link in resolve_links(hrefs, "https://example.com/dir/page?x=1"):
        assert link.startswith(("http://", "https://"))
        assert host_of(link)
        assert canonicalize_url(link) == link
