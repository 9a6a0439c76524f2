"""Hypothesis strategies for canonical URLs (shared by the rules' unit tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from crawler.urls import canonicalize_url

ORIGINS = ("http://a.example", "http://b.example:8080", "https://c.example")
segments = st.text(alphabet="abcxyz019-._~", min_size=1, max_size=6).filter(
    lambda s: s not in (".", "..")
)
paths = st.lists(segments, max_size=4).map(lambda parts: "/" + "/".join(parts)) | st.lists(
    segments, min_size=1, max_size=3
).map(lambda parts: "/" + "/".join(parts) + "/")
names = st.sampled_from(("sid", "sort", "print", "p", "ref", "x"))
values = st.text(alphabet="abc012", max_size=4)
queries = st.lists(st.tuples(names, values), max_size=3).map(
    lambda pairs: "&".join(f"{n}={v}" for n, v in pairs)
)


@st.composite
def urls(draw: st.DrawFn) -> str:
    origin = draw(st.sampled_from(ORIGINS))
    query = draw(queries)
    return canonicalize_url(origin + draw(paths) + (f"?{query}" if query else ""))


@st.composite
def related_pairs(draw: st.DrawFn) -> tuple[str, str]:
    """(duplicate, original): the original with another origin, extra leading path segments,
    and/or one parameter added or changed, as mirrors and session ids make them."""
    original = draw(urls())
    origin, _, rest = original.partition("://")[2].partition("/")
    scheme = original.partition("://")[0]
    host = draw(st.sampled_from(ORIGINS)) if draw(st.booleans()) else f"{scheme}://{origin}"
    extra = draw(st.lists(segments, max_size=2))
    path_and_query = "/" + "/".join([*extra, rest]) if extra else "/" + rest
    duplicate = host + path_and_query
    if draw(st.booleans()):
        name, value = draw(names), draw(values)
        duplicate += ("&" if "?" in duplicate else "?") + f"{name}={value}"
    return canonicalize_url(duplicate), original
