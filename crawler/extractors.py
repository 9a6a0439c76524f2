"""``NEARDUP_EXTRACTOR``: which function turns a fetched page into its visible text and links.

- ``fast`` (the default): :func:`crawler.extract.extract`, lxml's parser feeding one event walk;
- ``bs4``: :func:`crawler.extract_bs4.extract`, BeautifulSoup over the same parser, the
  reference the fast one is tested against (equal results on every fixture), several times
  slower (README, "Extraction");
- a dotted path (``package.module.function`` or ``package.module:function``) to your own
  callable with the same signature::

      def extract(body: bytes, url: str, declared_encoding: str | None,
                  options: crawler.extract.ExtractOptions) -> crawler.extract.Extracted: ...

  ``body`` is the raw response body, ``url`` the page's final URL (to resolve relative links),
  ``declared_encoding`` the HTTP ``Content-Type`` value if any, ``options`` the
  ``NEARDUP_INCLUDE_ALT_TEXT`` / ``NEARDUP_RESPECT_NOFOLLOW`` / ``NEARDUP_DROP_PARAMS`` knobs.
  Return ``Extracted(title, text, headings, outlinks)``: ``text`` is what the fingerprint is
  computed from, ``outlinks`` absolute URLs (canonicalise them with
  :func:`crawler.urls.resolve_links` so that they match the crawl's requests).

A setting that names no callable stops the crawl at start-up, saying what to change. An
extractor that raises on a page is the page's problem, not the crawl's: the spider middleware
logs it with the URL and counts it (``dedup/extract_errors``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

from crawler.config import BS4_EXTRACTOR, FAST_EXTRACTOR, ConfigError
from crawler.extract import DEFAULT_OPTIONS, Extracted, ExtractOptions

__all__ = ["BUILT_IN", "Extractor", "load_extractor"]

Extractor = Callable[[bytes, str, str | None, ExtractOptions], Extracted]

#: The built-in names and the functions they stand for.
BUILT_IN = {
    FAST_EXTRACTOR: "crawler.extract.extract",
    BS4_EXTRACTOR: "crawler.extract_bs4.extract",
}

_HELP = (
    "set NEARDUP_EXTRACTOR to 'fast' (the default), 'bs4', or the dotted path of a function "
    "extract(body, url, declared_encoding, options) -> crawler.extract.Extracted"
)


def load_extractor(name: str) -> Extractor:
    """The callable ``NEARDUP_EXTRACTOR`` names; :class:`ConfigError` naming the setting if
    it names none (unknown name, module that does not import, attribute missing or not
    callable, or a callable that cannot take the four arguments)."""
    path = BUILT_IN.get(name, name)
    module_name, attribute = _split(name, path)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"NEARDUP_EXTRACTOR={name!r}: cannot import {module_name!r} ({exc}); {_HELP}"
        ) from None
    found = getattr(module, attribute, None)
    if found is None:
        raise ConfigError(
            f"NEARDUP_EXTRACTOR={name!r}: {module_name!r} has no {attribute!r}; {_HELP}"
        )
    if not callable(found):
        raise ConfigError(f"NEARDUP_EXTRACTOR={name!r} is not callable; {_HELP}")
    _check_signature(name, found)
    extractor: Extractor = found
    return extractor


def _split(name: str, path: str) -> tuple[str, str]:
    if ":" in path:
        module_name, _, attribute = path.partition(":")
    else:
        module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        known = ", ".join(repr(n) for n in BUILT_IN)
        raise ConfigError(f"NEARDUP_EXTRACTOR={name!r} is not {known} nor a dotted path; {_HELP}")
    return module_name, attribute


def _check_signature(name: str, found: Callable[..., object]) -> None:
    try:
        signature = inspect.signature(found)
    except (TypeError, ValueError):
        return  # a builtin or C function without a signature: trust it
    try:
        signature.bind(b"", "http://example.com/", None, DEFAULT_OPTIONS)
    except TypeError as exc:
        raise ConfigError(
            f"NEARDUP_EXTRACTOR={name!r} cannot be called with "
            f"(body, url, declared_encoding, options): {exc}; {_HELP}"
        ) from None
