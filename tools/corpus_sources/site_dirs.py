"""The documentation sites as folders a crawler can crawl: ``build_corpus.py --sites DIR``.

The ``site`` family's pages (:mod:`corpus_sources.sites`) with their links, one folder per host
as ``wget --mirror`` writes a crawl, for ``neardup demo --site DIR``:

* one host per generator of a source (``official.npm``, ``mkdocs-rtd.npm``, ...): renderer
  mirrors live on different hosts, as on the web;
* on each host, every release under its own prefix (``/10.8.1/commands/npm-install.html``),
  and the newest again under ``/latest/`` (Read the Docs' alias) where there are several;
* a home page ``/`` listing the releases, and per release a contents page listing its pages
  by section (the generator's own ``index.html`` where it built one is kept, and the contents
  page is then ``contents.html``); the pages link to each other as their generator made them
  (sidebars, previous / next, cross references).

The crawl starts at every host's ``/``. Which pages are duplicates is not written anywhere: the
demo computes it from the pages themselves.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from html import escape
from pathlib import Path

from corpus_sources import holdout as held_out
from corpus_sources.sites import GENERATORS, SITE_GENERATORS, _title, trees

logger = logging.getLogger("build_corpus")

LATEST = "latest"


def host_name(generator: str, source: str) -> str:
    return f"{generator.replace('+', '.')}.{source}"


def write_site_dirs(
    cache: Path,
    out: Path,
    scale: float,
    sources: Sequence[str] = (),
    holdout: held_out.HeldOutSet | None = None,
) -> dict[str, int]:
    """Write every site (or those of ``sources``) under ``out``; pages written per host.
    ``holdout``: a set of held-out sites (:mod:`corpus_sources.holdout`) instead of the
    development sites."""
    source_trees = holdout.trees if holdout else trees
    generators = held_out.HOLDOUT_GENERATORS if holdout else GENERATORS
    site_generators = holdout.site_generators if holdout else SITE_GENERATORS
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty: the sites are written into a new folder")
    out.mkdir(parents=True, exist_ok=True)
    releases: dict[str, list[tuple[str, dict[str, str]]]] = {}  # host -> [(release, titles)]
    with tempfile.TemporaryDirectory(prefix="corpus-trees-") as tmp:
        for tree in source_trees(cache, Path(tmp), scale):
            if sources and tree.source not in sources:
                continue
            served = replace(tree, prefix=f"/{tree.release}")
            for generator in site_generators[tree.source]:
                if generator == "official" and tree.official is None:
                    continue
                host = host_name(generator, tree.source)
                pages = generators[generator](served)
                folder = out / host / tree.release
                for path, body in pages.items():
                    target = folder / (path.rsplit(".", 1)[0] + ".html")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(body)
                titles = {path: _title(tree.root / path, tree.suffix) for path in pages}
                releases.setdefault(host, []).append((tree.release, titles))
                logger.info("%s /%s/: %d pages", host, tree.release, len(pages))
    written = {}
    for host, listed in releases.items():
        contents = {r: _write_contents(out / host / r, host, r, titles) for r, titles in listed}
        if len(listed) > 1:
            _alias(out / host, listed[-1][0])
            contents = {LATEST: contents[listed[-1][0]], **contents}
        _write_home(out / host, host, contents)
        written[host] = sum(1 for _ in (out / host).rglob("*.html"))
    return written


def _alias(folder: Path, release: str) -> None:
    """``/latest/``: the newest release again, its links to itself under the alias (as Read
    the Docs builds it); relative links stay as they are."""
    shutil.copytree(folder / release, folder / LATEST)
    spelled = [(f"{q}/{release}/".encode(), f"{q}/{LATEST}/".encode()) for q in ('"', "'")]
    for page in (folder / LATEST).rglob("*.html"):
        body = page.read_bytes()
        for old, new in spelled:
            body = body.replace(b"href=" + old, b"href=" + new)
        page.write_bytes(body)


def _write_contents(folder: Path, host: str, release: str, titles: dict[str, str]) -> str:
    """Write the release's contents page: ``index.html``, unless the generator built one
    (then ``contents.html``); its name."""
    sections: dict[str, list[str]] = {}
    for path in sorted(titles):
        sections.setdefault(path.rpartition("/")[0], []).append(path)
    parts = []
    for section, paths in sections.items():
        items = "".join(
            f'<li><a href="{escape(p.rsplit(".", 1)[0])}.html">{escape(titles[p])}</a></li>'
            for p in paths
        )
        parts.append(f"<h2>{escape(section or 'Overview')}</h2><ul>{items}</ul>")
    page = _page(f"{host} {release}: contents", "".join(parts))
    folder.mkdir(parents=True, exist_ok=True)
    name = "contents.html" if (folder / "index.html").is_file() else "index.html"
    (folder / name).write_text(page, encoding="utf-8")
    return name


def _write_home(folder: Path, host: str, contents: dict[str, str]) -> None:
    """The host's home: every release's contents page, the newest (and ``latest``) first."""
    listed = [*([LATEST] if LATEST in contents else []), *reversed(contents)]
    items = "".join(
        f'<li><a href="/{escape(r)}/{contents[r]}">{escape(r)}</a></li>'
        for r in dict.fromkeys(listed)
    )
    (folder / "index.html").write_text(
        _page(f"{host}: documentation", f"<h2>Releases</h2><ul>{items}</ul>"), encoding="utf-8"
    )


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}'
        f"</title></head><body><header><a href='/'>Home</a></header><main><h1>{escape(title)}"
        f"</h1>{body}</main></body></html>"
    )
