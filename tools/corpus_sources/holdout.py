"""Held-out documentation sites: projects and generators the detector was never tuned on.

    python tools/build_corpus.py --download CACHE        # fetches these sdists too
    python tools/build_corpus.py --sites DIR --holdout

Every threshold, rule bar and judge of neardup was set while looking at the development sites
(:mod:`corpus_sources.sites`: npm, Node.js, docutils, click, CMake, npm READMEs). These sites
are built the same way from other projects' sdists, none of which the development corpus
contains, and partly by generators and themes it does not use (Sphinx's nature, pyramid, haiku
and agogo themes, MkDocs' own theme, docutils in a Jekyll page). A crawl of them is the check
that the figures on the development sites are not fitted to those sites:

* Flask 3.0.2, 3.0.3, 3.1.0 and Werkzeug 3.0.6, 3.1.3: consecutive releases, three and two
  generators;
* Jinja 3.1.4, 3.1.5: few, long pages;
* pytest 8.3.3, 8.3.4: 247 pages a release, ~180 of them release announcements: short pages
  from one template that differ in a version, a date and a list of names (alike in form, not
  near-duplicates: the hard case for precision);
* Black 24.8.0, 24.10.0 and attrs 24.2.0, 24.3.0: Markdown (MyST) by MkDocs and three file
  renderers.

``--families holdout`` (without ``--sites``) writes the same pages as a labelled corpus for
``neardup eval``; the default families do not include it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from corpus_sources.common import Doc
from corpus_sources.sites import (
    GENERATORS,
    Generator,
    Tree,
    _docutils,
    _mkdocs,
    _paths,
    _sphinx,
    _unpack,
    _wrapped,
    site_docs,
)

#: (sdist project, releases, docs folder in the sdist, source suffix, repository)
PROJECTS: tuple[tuple[str, tuple[str, ...], str, str, str], ...] = (
    ("flask", ("3.0.2", "3.0.3", "3.1.0"), "docs", ".rst", "https://github.com/pallets/flask"),
    ("werkzeug", ("3.0.6", "3.1.3"), "docs", ".rst", "https://github.com/pallets/werkzeug"),
    ("jinja2", ("3.1.4", "3.1.5"), "docs", ".rst", "https://github.com/pallets/jinja"),
    ("pytest", ("8.3.3", "8.3.4"), "doc/en", ".rst", "https://github.com/pytest-dev/pytest"),
    ("black", ("24.8.0", "24.10.0"), "docs", ".md", "https://github.com/psf/black"),
    ("attrs", ("24.2.0", "24.3.0"), "docs", ".md", "https://github.com/python-attrs/attrs"),
)

#: Release dates, shown as "last updated" by the templates (keyed by project and release:
#: two projects can share a release number).
HOLDOUT_DATES = {
    "flask@3.0.2": "2024-02-03",
    "flask@3.0.3": "2024-04-07",
    "flask@3.1.0": "2024-11-13",
    "werkzeug@3.0.6": "2024-10-25",
    "werkzeug@3.1.3": "2024-11-08",
    "jinja2@3.1.4": "2024-05-05",
    "jinja2@3.1.5": "2024-12-21",
    "pytest@8.3.3": "2024-09-10",
    "pytest@8.3.4": "2024-12-01",
    "black@24.8.0": "2024-08-02",
    "black@24.10.0": "2024-10-07",
    "attrs@24.2.0": "2024-08-06",
    "attrs@24.3.0": "2024-12-16",
}


#: The development sites' generators, and four Sphinx themes, MkDocs' own theme and docutils
#: in a Jekyll page that they do not use.
HOLDOUT_GENERATORS: dict[str, Generator] = {
    **GENERATORS,
    "sphinx-nature": _sphinx("nature"),
    "sphinx-pyramid": _sphinx("pyramid"),
    "sphinx-haiku": _sphinx("haiku"),
    "sphinx-agogo": _sphinx("agogo"),
    "mkdocs-mkdocs": _mkdocs("mkdocs"),
    "docutils+jekyll": _wrapped(_docutils, "jekyll"),
}

#: Which generators build which held-out source: one host per (generator, source).
HOLDOUT_SITE_GENERATORS: dict[str, tuple[str, ...]] = {
    "flask": ("sphinx-nature", "docutils+jekyll", "pandoc+docusaurus"),
    "werkzeug": ("sphinx-pyramid", "pandoc+jekyll-rst"),
    "jinja2": ("sphinx-haiku", "docutils+readthedocs"),
    "pytest": ("sphinx-agogo", "pandoc+docusaurus"),
    "black": ("mkdocs-mkdocs", "markdown-it+docusaurus", "python-markdown+jekyll"),
    "attrs": ("mistune+repository", "pandoc+jekyll", "mkdocs-rtd"),
}


def archives() -> Iterator[tuple[str, str]]:
    """(project, release) of every sdist the held-out sites need (for ``--download``)."""
    for project, releases, *_ in PROJECTS:
        for release in releases:
            yield project, release


def holdout_trees(cache: Path, work: Path, scale: float) -> Iterator[Tree]:
    """Every held-out source tree, unpacked under ``work``."""
    del scale  # every page of these small trees is taken
    for project, releases, docs, suffix, repo in PROJECTS:
        for release in releases:
            base = f"{project}-{release}"
            root = _unpack(cache / "pypi" / f"{base}.tar.gz", f"{base}/{docs}", work)
            paths = _paths(root, suffix, 1.0, project, ("_build", "_templates", "/_"))
            updated = HOLDOUT_DATES[f"{project}@{release}"]
            yield Tree(project, release, root, suffix, paths, repo, updated=updated)


def holdout_docs(cache: Path, scale: float) -> Iterator[Doc]:
    """Every page of every held-out site through the crawler's extractor: the ``holdout``
    family of ``build_corpus.py`` (``--families holdout``), a corpus for ``neardup eval``."""
    return site_docs(cache, scale, holdout_trees, HOLDOUT_GENERATORS, HOLDOUT_SITE_GENERATORS)
