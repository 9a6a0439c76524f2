"""Held-out documentation sites: projects and generators the detector was never tuned on.

    python tools/build_corpus.py --download CACHE        # fetches these sdists too
    python tools/build_corpus.py --sites DIR --holdout   # the first set
    python tools/build_corpus.py --sites DIR --holdout second

Every threshold, rule bar and judge of neardup was set while looking at the development sites
(:mod:`corpus_sources.sites`: npm, Node.js, docutils, click, CMake, npm READMEs). These sites
are built the same way from other projects' sdists, none of which the development corpus
contains, and partly by generators and themes it does not use. A crawl of them is the check
that the figures on the development sites are not fitted to those sites.

The **first** set (27 Nov), partly by Sphinx's nature, pyramid, haiku and agogo themes,
MkDocs' own theme and docutils in a Jekyll page:

* Flask 3.0.2, 3.0.3, 3.1.0 and Werkzeug 3.0.6, 3.1.3: consecutive releases, three and two
  generators;
* Jinja 3.1.4, 3.1.5: few, long pages;
* pytest 8.3.3, 8.3.4: 247 pages a release, ~180 of them release announcements: short pages
  from one template that differ in a version, a date and a list of names (alike in form, not
  near-duplicates: the hard case for precision);
* Black 24.8.0, 24.10.0 and attrs 24.2.0, 24.3.0: Markdown (MyST) by MkDocs and three file
  renderers.

The first set's crawls then led to changes of the crawler (sessions eleven to seventeen: short
pages, release notes, release front pages), so it is no longer held out for those. The
**second** set (29 Nov) was built after them and never tuned on, partly by the Sphinx themes
neither other set uses (sphinxdoc, bizstyle, traditional, scrolls):

* coverage.py 7.6.7, 7.6.8, 7.6.9: three patch releases a few weeks apart, whose pages differ
  mostly in the version and the change log;
* mypy 1.13.0, 1.14.0 and trio 0.26.2, 0.27.0: long reference pages;
* urllib3 2.2.3, 2.3.0 and packaging 24.1, 24.2: small sites;
* pip 24.2, 24.3.1: ~80 Markdown (MyST) pages by MkDocs and two file renderers.

``--families holdout`` (without ``--sites``) writes the first set's pages as a labelled corpus
for ``neardup eval``, ``--families holdout2`` the second's; the default families include
neither.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
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
Project = tuple[str, tuple[str, ...], str, str, str]


@dataclass(frozen=True)
class HeldOutSet:
    """One set of held-out sites: its projects, their release dates (shown as "last updated"
    by the templates; keyed by project and release, as two projects can share a release
    number) and the generators that build each project, one host per (generator, project)."""

    name: str
    projects: tuple[Project, ...]
    dates: dict[str, str]
    site_generators: dict[str, tuple[str, ...]]

    def archives(self) -> Iterator[tuple[str, str]]:
        """(project, release) of every sdist the set needs (for ``--download``)."""
        for project, releases, *_ in self.projects:
            for release in releases:
                yield project, release

    def trees(self, cache: Path, work: Path, scale: float) -> Iterator[Tree]:
        """Every source tree of the set, unpacked under ``work``."""
        del scale  # every page of these small trees is taken
        for project, releases, docs, suffix, repo in self.projects:
            for release in releases:
                base = f"{project}-{release}"
                root = _unpack(cache / "pypi" / f"{base}.tar.gz", f"{base}/{docs}", work)
                paths = _paths(root, suffix, 1.0, project, ("_build", "_templates", "/_"))
                updated = self.dates[f"{project}@{release}"]
                yield Tree(project, release, root, suffix, paths, repo, updated=updated)

    def docs(self, cache: Path, scale: float) -> Iterator[Doc]:
        """Every page of every site of the set through the crawler's extractor: a labelled
        corpus for ``neardup eval`` (``build_corpus.py --families holdout`` / ``holdout2``)."""
        return site_docs(cache, scale, self.trees, HOLDOUT_GENERATORS, self.site_generators)


#: The development sites' generators, and the Sphinx themes, MkDocs' own theme and docutils in
#: a Jekyll page that they do not use.
HOLDOUT_GENERATORS: dict[str, Generator] = {
    **GENERATORS,
    "sphinx-nature": _sphinx("nature"),
    "sphinx-pyramid": _sphinx("pyramid"),
    "sphinx-haiku": _sphinx("haiku"),
    "sphinx-agogo": _sphinx("agogo"),
    "sphinx-sphinxdoc": _sphinx("sphinxdoc"),
    "sphinx-bizstyle": _sphinx("bizstyle"),
    "sphinx-traditional": _sphinx("traditional"),
    "sphinx-scrolls": _sphinx("scrolls"),
    "mkdocs-mkdocs": _mkdocs("mkdocs"),
    "docutils+jekyll": _wrapped(_docutils, "jekyll"),
}

FIRST = HeldOutSet(
    "first",
    projects=(
        ("flask", ("3.0.2", "3.0.3", "3.1.0"), "docs", ".rst", "https://github.com/pallets/flask"),
        ("werkzeug", ("3.0.6", "3.1.3"), "docs", ".rst", "https://github.com/pallets/werkzeug"),
        ("jinja2", ("3.1.4", "3.1.5"), "docs", ".rst", "https://github.com/pallets/jinja"),
        ("pytest", ("8.3.3", "8.3.4"), "doc/en", ".rst", "https://github.com/pytest-dev/pytest"),
        ("black", ("24.8.0", "24.10.0"), "docs", ".md", "https://github.com/psf/black"),
        ("attrs", ("24.2.0", "24.3.0"), "docs", ".md", "https://github.com/python-attrs/attrs"),
    ),
    dates={
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
    },
    site_generators={
        "flask": ("sphinx-nature", "docutils+jekyll", "pandoc+docusaurus"),
        "werkzeug": ("sphinx-pyramid", "pandoc+jekyll-rst"),
        "jinja2": ("sphinx-haiku", "docutils+readthedocs"),
        "pytest": ("sphinx-agogo", "pandoc+docusaurus"),
        "black": ("mkdocs-mkdocs", "markdown-it+docusaurus", "python-markdown+jekyll"),
        "attrs": ("mistune+repository", "pandoc+jekyll", "mkdocs-rtd"),
    },
)

SECOND = HeldOutSet(
    "second",
    projects=(
        (
            "coverage",
            ("7.6.7", "7.6.8", "7.6.9"),
            "doc",
            ".rst",
            "https://github.com/nedbat/coveragepy",
        ),
        ("mypy", ("1.13.0", "1.14.0"), "docs/source", ".rst", "https://github.com/python/mypy"),
        (
            "trio",
            ("0.26.2", "0.27.0"),
            "docs/source",
            ".rst",
            "https://github.com/python-trio/trio",
        ),
        ("urllib3", ("2.2.3", "2.3.0"), "docs", ".rst", "https://github.com/urllib3/urllib3"),
        ("packaging", ("24.1", "24.2"), "docs", ".rst", "https://github.com/pypa/packaging"),
        ("pip", ("24.2", "24.3.1"), "docs/html", ".md", "https://github.com/pypa/pip"),
    ),
    dates={
        "coverage@7.6.7": "2024-11-15",
        "coverage@7.6.8": "2024-11-23",
        "coverage@7.6.9": "2024-12-06",
        "mypy@1.13.0": "2024-10-22",
        "mypy@1.14.0": "2024-12-20",
        "trio@0.26.2": "2024-08-08",
        "trio@0.27.0": "2024-10-17",
        "urllib3@2.2.3": "2024-09-12",
        "urllib3@2.3.0": "2024-12-22",
        "packaging@24.1": "2024-06-10",
        "packaging@24.2": "2024-11-08",
        "pip@24.2": "2024-07-28",
        "pip@24.3.1": "2024-10-27",
    },
    site_generators={
        "coverage": ("sphinx-sphinxdoc", "docutils+readthedocs", "pandoc+jekyll-rst"),
        "mypy": ("sphinx-bizstyle", "docutils+jekyll"),
        "trio": ("sphinx-traditional", "pandoc+docusaurus"),
        "urllib3": ("sphinx-scrolls", "docutils+readthedocs"),
        "packaging": ("sphinx-classic", "pandoc+jekyll-rst"),
        "pip": ("mkdocs-mkdocs", "mistune+docusaurus", "python-markdown+jekyll"),
    },
)

#: The sets by the name ``build_corpus.py --holdout NAME`` takes.
HELD_OUT_SETS = {FIRST.name: FIRST, SECOND.name: SECOND}

# The first set under its earlier names.
PROJECTS = FIRST.projects
HOLDOUT_DATES = FIRST.dates
HOLDOUT_SITE_GENERATORS = FIRST.site_generators


def archives() -> Iterator[tuple[str, str]]:
    """(project, release) of every sdist of every held-out set (for ``--download``)."""
    for held_out in HELD_OUT_SETS.values():
        yield from held_out.archives()


def holdout_trees(cache: Path, work: Path, scale: float) -> Iterator[Tree]:
    """Every source tree of the first set, unpacked under ``work``."""
    return FIRST.trees(cache, work, scale)


def holdout_docs(cache: Path, scale: float) -> Iterator[Doc]:
    """The ``holdout`` family: the first set's pages as a labelled corpus."""
    return FIRST.docs(cache, scale)
