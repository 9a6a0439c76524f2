"""URL canonicalisation for the crawler: one spelling per resource.

The spider's URL-seen filter and the outlink extractor both key on the strings produced here, so
two spellings of the same page (``HTTP://Example.com:80/a?b=2&a=1#top`` and
``http://example.com/a?a=1&b=2``) must map to one string, and tracking or session parameters
(``utm_source``, ``jsessionid``...) must not make one page look like many.

Percent-encoding, query sorting, IDNA hosts, dot segments and fragment removal come from
:func:`w3lib.url.canonicalize_url`; this module adds what it leaves out: default ports, trailing
dots in hosts, and dropping query parameters and ``;name=value`` path parameters by name.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from urllib.parse import SplitResult, unquote_plus, urljoin, urlsplit

from w3lib.url import canonicalize_url as _w3lib_canonicalize_url

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_DROP_PARAMS",
    "canonicalize_url",
    "clear_url_caches",
    "host_of",
    "resolve_links",
]

#: Query/path parameter names dropped by default. Matching is case-insensitive on the
#: percent-decoded name; a trailing ``*`` makes the entry a prefix. Only parameters that never
#: select content belong here: ``s``/``q``/``id`` are often search terms or keys, so they stay.
DEFAULT_DROP_PARAMS: frozenset[str] = frozenset(
    {
        # campaign and click trackers
        "utm_*",
        "gclid",
        "gbraid",
        "wbraid",
        "dclid",
        "fbclid",
        "msclkid",
        "yclid",
        "igshid",
        "mc_cid",
        "mc_eid",
        "_ga",
        "_gl",
        "_hsenc",
        "_hsmi",
        "mkt_tok",
        "ref_src",
        # server session identifiers
        "sessionid",
        "session_id",
        "sid",
        "phpsessid",
        "jsessionid",
        "aspsessionid*",
    }
)

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HTTP_SCHEMES = frozenset(_DEFAULT_PORTS)
# Browsers strip these from both ends of an href and delete tabs/newlines inside it.
_URL_STRIP = "\t\n\r\f "
_TAB_NEWLINE = re.compile(r"[\t\n\r]")
# ";name=value" inside a path (Java's ";jsessionid=..."); the name is group 1.
_PATH_PARAM = re.compile(r";([^;/=]*)=[^;/]*")
# What _fast_canonical handles: lowercase http(s) scheme, ASCII host, optional port without a
# leading zero, a path without "%", ";" or "?", a query of unreserved characters, any fragment.
_PLAIN_URL = re.compile(
    r"(https?)://([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)(?::([1-9][0-9]{0,4}))?"
    r"(/[A-Za-z0-9._~!$&'()*+,=:@/-]*)?(?:\?([A-Za-z0-9._~=&-]*))?(?:#.*)?",
    re.DOTALL,
)
# Bounded so a long crawl cannot grow it without limit; nav and footer links repeat across the
# pages of a site, so most outlinks hit.
_CACHE_SIZE = 1 << 15

ParamMatcher = Callable[[str], bool]


def canonicalize_url(url: str, drop_params: Iterable[str] = DEFAULT_DROP_PARAMS) -> str:
    """Return the canonical form of an absolute ``url``.

    Lowercases scheme and host, IDNA-encodes the host, drops the default port and trailing dots
    of the host, removes the fragment, sorts query parameters, normalises percent-encoding,
    resolves dot segments and drops the query and ``;name=value`` path parameters named by
    ``drop_params`` (see :data:`DEFAULT_DROP_PARAMS`). Idempotent.

    Raises ``ValueError`` if the URL cannot be parsed (e.g. an unbalanced IPv6 bracket or a
    non-numeric port).
    """
    return _canonicalize_cached(_clean(url), _as_frozenset(drop_params))


def host_of(url: str) -> str:
    """Return the canonical host of ``url`` (lowercase, IDNA, no port, brackets stripped from
    IPv6), or ``""`` if it has none or cannot be parsed."""
    try:
        return urlsplit(_canonicalize_cached(_clean(url), frozenset())).hostname or ""
    except ValueError:
        return ""


def resolve_links(
    hrefs: Iterable[str], base_url: str, drop_params: Iterable[str] = DEFAULT_DROP_PARAMS
) -> list[str]:
    """Resolve link targets against ``base_url`` into canonical http(s) URLs.

    Keeps only http(s) URLs with a host (``mailto:``, ``javascript:``, ``tel:``, ``data:``...
    are dropped, as are unparsable ones), skips empty and fragment-only hrefs (they point into
    the base document itself) and de-duplicates, preserving first-seen order.
    """
    drop = _as_frozenset(drop_params)
    origin = _http_origin(base_url)
    found: dict[str, None] = {}
    # dict.fromkeys de-duplicates the raw hrefs first: nav and footer often repeat links.
    for href in dict.fromkeys(hrefs):
        url = _resolve_one(_clean(href), base_url, origin, drop)
        if url is not None:
            found.setdefault(url)
    return list(found)


def clear_url_caches() -> None:
    """Forget every cached canonical URL, as in a fresh process (``bench_extract`` times
    extraction with a cold cache this way)."""
    _canonicalize_cached.cache_clear()
    _http_canonical_cached.cache_clear()


def _resolve_one(href: str, base_url: str, origin: str, drop: frozenset[str]) -> str | None:
    if not href or href.startswith("#"):
        return None
    try:
        return _http_canonical_cached(_join(base_url, origin, href), drop)
    except ValueError:
        logger.debug("unparsable link %r on %s", href, base_url)
        return None


@lru_cache(maxsize=_CACHE_SIZE)
def _http_canonical_cached(url: str, drop_params: frozenset[str]) -> str | None:
    # Cached with the scheme/host check: a warm outlink then costs one dict lookup.
    matches = _param_matcher(drop_params)
    fast = _fast_canonical(url, matches)
    if fast is not None:
        return fast  # the plain-URL pattern only matches http(s) URLs with a host
    canonical = _full_canonical(url, matches)
    parts = urlsplit(canonical)
    return canonical if parts.scheme in _HTTP_SCHEMES and parts.hostname else None


def _join(base_url: str, origin: str, href: str) -> str:
    # urljoin() costs a few microseconds per link; the two commonest forms, root-relative and
    # absolute http(s), need no joining (canonicalisation resolves their dot segments).
    if origin and href.startswith("/") and not href.startswith("//"):
        return origin + href
    if href[:8].lower().startswith(("http://", "https://")):
        return href
    return urljoin(base_url, href)


def _http_origin(base_url: str) -> str:
    try:
        parts = urlsplit(base_url)
    except ValueError:
        return ""
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme in _HTTP_SCHEMES else ""


def _clean(url: str) -> str:
    url = url.strip(_URL_STRIP)
    return _TAB_NEWLINE.sub("", url) if "\t" in url or "\n" in url or "\r" in url else url


def _as_frozenset(names: Iterable[str]) -> frozenset[str]:
    # frozenset caches its hash, so passing the same set keeps the lru_cache lookups cheap.
    return names if isinstance(names, frozenset) else frozenset(names)


@lru_cache(maxsize=_CACHE_SIZE)
def _canonicalize_cached(url: str, drop_params: frozenset[str]) -> str:
    matches = _param_matcher(drop_params)
    fast = _fast_canonical(url, matches)
    return fast if fast is not None else _full_canonical(url, matches)


def _full_canonical(url: str, matches: ParamMatcher) -> str:
    # w3lib first, then our passes on its already-normalised output: names are decoded
    # consistently and the query is already sorted, so filtering keeps it sorted.
    parts = urlsplit(_w3lib_canonicalize_url(url))
    query = _filter_query(parts.query, matches) if parts.query else ""
    path = _strip_path_params(parts.path, matches)
    return _unsplit(parts, _canonical_netloc(parts), path, query)


def _fast_canonical(url: str, matches: ParamMatcher) -> str | None:
    """The canonical form of a plain ASCII http(s) URL, or None to take the full path.

    Most links are plain (lowercase scheme, ASCII host, no percent-escapes, no dot segments,
    unreserved query), and for those w3lib's answer is known in advance: this is several times
    faster. The unit tests check that the two agree wherever this one answers.
    """
    match = _PLAIN_URL.fullmatch(url)
    if match is None:
        return None
    scheme, host, port, path, query = match.groups()
    if (path and "/." in path) or (port and int(port) > 65535):
        return None
    if query:
        query = _plain_query(query, matches)
        if query is None:
            return None
    host = host.lower()
    netloc = host if port is None or _is_default_port(scheme, port) else f"{host}:{port}"
    return f"{scheme}://{netloc}{path or '/'}" + (f"?{query}" if query else "")


def _plain_query(query: str, matches: ParamMatcher) -> str | None:
    pairs = []
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if "=" in value:
            return None  # w3lib escapes a second "=": leave that to it
        if pair and not matches(name):
            pairs.append((name, value))
    pairs.sort()
    return "&".join(f"{name}={value}" for name, value in pairs)


@lru_cache(maxsize=64)
def _param_matcher(drop_params: frozenset[str]) -> ParamMatcher:
    exact = frozenset(name.lower() for name in drop_params if not name.endswith("*"))
    prefixes = tuple(name[:-1].lower() for name in drop_params if name.endswith("*"))

    def matches(name: str) -> bool:
        name = unquote_plus(name).lower() if "%" in name or "+" in name else name.lower()
        return name in exact or (bool(prefixes) and name.startswith(prefixes))

    return matches


def _strip_path_params(path: str, matches: ParamMatcher) -> str:
    if ";" not in path:
        return path
    return _PATH_PARAM.sub(lambda m: "" if matches(m.group(1)) else m.group(0), path)


def _filter_query(query: str, matches: ParamMatcher) -> str:
    pairs = query.split("&")
    return "&".join(pair for pair in pairs if not matches(pair.partition("=")[0]))


def _canonical_netloc(parts: SplitResult) -> str:
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    host, port = _split_port(hostport)
    if port is not None and _is_default_port(parts.scheme, port):
        port = None
    # "example.com." names the same host as "example.com" (fully-qualified form).
    if not host.startswith("["):
        host = host.rstrip(".")
    return userinfo + at + host + (":" + port if port is not None else "")


def _split_port(hostport: str) -> tuple[str, str | None]:
    # Bracketed IPv6 literals contain colons, so look for the port after the closing bracket.
    colon = hostport.rfind(":")
    if colon == -1 or colon < hostport.rfind("]"):
        return hostport, None
    return hostport[:colon], hostport[colon + 1 :]


def _is_default_port(scheme: str, port: str) -> bool:
    default = _DEFAULT_PORTS.get(scheme)
    return default is not None and port.isascii() and port.isdigit() and int(port) == default


def _unsplit(parts: SplitResult, netloc: str, path: str, query: str) -> str:
    # Built by hand rather than with urlunsplit(), which rewrites some odd paths ("//x") and
    # would then not be idempotent with urlsplit().
    authority = "//" + netloc if netloc or parts.scheme in _HTTP_SCHEMES else ""
    scheme = parts.scheme + ":" if parts.scheme else ""
    return scheme + authority + path + ("?" + query if query else "")
