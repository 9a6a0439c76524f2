"""The rule kinds: URL splitting, application, keys that read back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.rules.rewrite import (
    ParamRule,
    PathRewrite,
    parse_rule,
    prefix_matches,
    rule_id,
    split_url,
)
from crawler.urls import canonicalize_url
from tests.support.url_strategies import ORIGINS, paths, urls

M, D = "http://mirror.example", "http://docs.example"


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        ("http://a.example/", ("http://a.example", "/", "")),
        ("http://a.example/x/y?b=1&c=2", ("http://a.example", "/x/y", "b=1&c=2")),
        ("https://a.example:8443/x?", ("https://a.example:8443", "/x", "")),
        ("http://a.example", ("http://a.example", "/", "")),
        ("http://a.example?q=1", ("http://a.example", "/", "q=1")),
        ("http://a.example/p?u=http://b/c", ("http://a.example", "/p", "u=http://b/c")),
    ],
)
def test_split_url(url: str, parts: tuple[str, str, str]) -> None:
    assert split_url(url) == parts


@given(urls())
def test_split_url_agrees_with_urlsplit(url: str) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    assert split_url(url) == (f"{parts.scheme}://{parts.netloc}", parts.path or "/", parts.query)


@pytest.mark.parametrize(
    ("prefix", "path", "expected"),
    [
        ("", "/anything", True),
        ("/docs/v1", "/docs/v1", True),
        ("/docs/v1", "/docs/v1/", True),
        ("/docs/v1", "/docs/v1/a/b", True),
        ("/docs/v1", "/docs/v10", False),
        ("/docs/v1", "/docs", False),
        ("/x/", "/x/", True),
        ("/x/", "/x/y", False),  # a full path with a trailing slash matches only itself
    ],
)
def test_prefixes_match_at_segment_boundaries(prefix: str, path: str, expected: bool) -> None:
    assert prefix_matches(prefix, path) is expected


def test_prefix_rewrite_moves_host_and_prefix_and_keeps_the_query() -> None:
    rule = PathRewrite(M, "/pub/v1", D, "/docs")
    assert rule.kind == "prefix"
    assert rule.apply(f"{M}/pub/v1/a/b?x=1") == f"{D}/docs/a/b?x=1"
    assert rule.apply(f"{M}/pub/v1") == f"{D}/docs"
    assert rule.apply(f"{M}/pub/v10/a") is None
    assert rule.apply(f"{D}/pub/v1/a") is None  # other origin
    assert PathRewrite(M, "/pub", M, "").apply(f"{M}/pub") == f"{M}/"


def test_host_alias_keeps_path_and_query() -> None:
    rule = PathRewrite(M, "", D, "")
    assert rule.kind == "host"
    assert rule.apply(f"{M}/a?b=2") == f"{D}/a?b=2"
    assert rule.apply(f"{M}/") == f"{D}/"
    assert rule.inverse() == PathRewrite(D, "", M, "")


def test_parameter_rules_drop_or_set_one_or_any_value() -> None:
    url = f"{D}/item?a=1&sessid=abc&z=9"
    assert ParamRule(D, "sessid").apply(url) == f"{D}/item?a=1&z=9"
    assert ParamRule(D, "sessid", "abc").apply(url) == f"{D}/item?a=1&z=9"
    assert ParamRule(D, "sessid", "xyz").apply(url) is None
    assert ParamRule(D, "sessid", None, "0").apply(url) == f"{D}/item?a=1&sessid=0&z=9"
    assert ParamRule(D, "a", None, "zz").apply(url) == f"{D}/item?a=zz&sessid=abc&z=9"
    assert ParamRule(M, "sessid").apply(url) is None  # scoped to its origin
    assert ParamRule(D, "sessid").apply(f"{D}/item") is None
    assert ParamRule(D, "print").apply(f"{D}/item?print=1") == f"{D}/item"
    assert ParamRule(D, "sort", None, "asc").apply(f"{D}/x?sort=asc") is None  # already so


def test_a_set_value_is_sorted_into_canonical_order() -> None:
    rule = ParamRule(D, "b", None, "0")
    counterpart = rule.apply(f"{D}/x?b=9&b=z")
    assert counterpart == canonicalize_url(f"{D}/x?b=0&b=0")


@pytest.mark.parametrize(
    "rule",
    [
        PathRewrite(M, "", D, ""),
        PathRewrite(M, "/pub/manual-3.2", D, "/manual"),
        PathRewrite(M, "", D, "/docs"),
        PathRewrite(M, "/", D, "/x"),
        PathRewrite(M, "/x/", D, "/y"),
        ParamRule(D, "sessid"),
        ParamRule(D, "sessid", "abc"),
        ParamRule(D, "sort", None, "asc"),
        ParamRule(D, "sort", "", "asc"),
        ParamRule(D, "print", "1", ""),
    ],
)
def test_keys_read_back(rule: PathRewrite | ParamRule) -> None:
    assert parse_rule(rule.key) == rule
    assert rule.id == rule_id(rule.key) and len(rule.id) == 16


@pytest.mark.parametrize(
    "key",
    [
        "",
        "host",
        "host http://a",
        "prefix http://a/x?q=1 http://b/y",
        "param http://a x",
        "param http://a x y -",
        "param http://a x * z",
        "mirror http://a http://b",
        "host /x http://b",
    ],
)
def test_malformed_keys_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match="not"):
        parse_rule(key)


@given(st.sampled_from(ORIGINS), paths, st.sampled_from(ORIGINS), paths, urls())
def test_path_rewrites_read_back_and_give_canonical_urls(
    src: str, src_path: str, dst: str, dst_path: str, url: str
) -> None:
    rule = PathRewrite(src, src_path.rstrip("/"), dst, dst_path.rstrip("/"))
    assert parse_rule(rule.key) == rule
    counterpart = rule.apply(url)
    if counterpart is not None:
        assert counterpart == canonicalize_url(counterpart)
        if split_url(url)[1] != rule.src_prefix:  # "/p" -> "" reads back as "/p/"
            assert rule.inverse().apply(counterpart) == url


@given(urls(), st.sampled_from(("sid", "sort", "x")), st.none() | st.text("ab0", max_size=2))
def test_parameter_rules_give_canonical_urls_without_the_parameter(
    url: str, name: str, replacement: str | None
) -> None:
    counterpart = ParamRule(split_url(url)[0], name, None, replacement).apply(url)
    if counterpart is None:
        return
    assert counterpart == canonicalize_url(counterpart)
    pairs = split_url(counterpart)[2].split("&")
    found = {pair.partition("=")[2] for pair in pairs if pair.partition("=")[0] == name}
    assert found == (set() if replacement is None else {replacement})
