"""Documentation sites: one source tree, several generators and releases, as a crawler sees them.

A *site* is a source tree of one project in one release (npm's docs in four npm releases, the
Node.js API docs, the docs of docutils and click sdists in consecutive releases, CMake's help,
READMEs of installed npm packages) built by several generators, each with its own template:

* the project's own HTML where it ships one (npm's and Node's generators);
* real generators with their themes: MkDocs (``readthedocs`` theme), Sphinx (alabaster,
  classic), pandoc's standalone page;
* a file renderer (Python-Markdown, markdown-it-py, mistune, pandoc, docutils) wrapped in a
  template modelled on a common theme (``templates``).

Every page goes through the crawler's extractor. Pairs between pages then come in three
relations, read off the ids ``{source}@{release}/{generator}:{path}``: the same path by two
generators (a *mirror*), the same path in two releases (a *release* pair) and two paths of one
site (a *template* pair: shared navigation, different content).
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from corpus_sources import render, templates
from corpus_sources.common import Doc, MissingTool, page_doc, sampled

logger = logging.getLogger("build_corpus")

NPM_RELEASES = ("10.8.1", "10.8.2", "10.9.0")  # from the cache; 11.x is the installed npm
DOCUTILS_RELEASES = ("0.20.1", "0.21.1", "0.21.2")
CLICK_RELEASES = ("8.1.6", "8.1.7")
INSTALLED_NPM = Path("/usr/lib/node_modules/npm")
NODE_API = Path("/usr/share/doc/nodejs/api")
CMAKE_HELP = Path("/usr/share/cmake-3.25/Help")
REPOS = {
    "docutils": "https://sourceforge.net/p/docutils/code",
    "click": "https://github.com/pallets/click",
}
DATES = {  # release dates, shown as "last updated" by the templates
    "10.8.1": "2024-05-29",
    "10.8.2": "2024-07-09",
    "10.9.0": "2024-10-03",
    "0.20.1": "2023-05-17",
    "0.21.1": "2024-04-10",
    "0.21.2": "2024-04-23",
    "8.1.6": "2023-07-18",
    "8.1.7": "2023-08-17",
    "3.25.1": "2022-12-01",
}
DEFAULT_DATE = "2025-03-24"  # the installed npm and Node.js packages


@dataclass(frozen=True)
class Tree:
    """One project's documentation sources in one release."""

    source: str  # "npm", "node-api", "docutils", "click", "cmake", "readme"
    release: str
    root: Path
    suffix: str  # ".md", ".rst" or ".txt"
    paths: tuple[str, ...]  # relative paths of the pages taken
    repo: str
    official: Path | None = None  # the project's own HTML build of the same paths
    #: Where the release is served (``--sites``: "/10.9.0"); the hand-made templates' links
    #: start with it. Links are not visible text: the corpus is the same whatever it is.
    prefix: str = ""
    #: The release date the templates show; ``DATES[release]`` when not given.
    updated: str | None = None

    @property
    def date(self) -> str:
        return self.updated or DATES.get(self.release, DEFAULT_DATE)


Generator = Callable[[Tree], dict[str, bytes]]


def _title(path: Path, suffix: str) -> str:
    """The page title a generator would show: front matter, first heading, or the file name."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if suffix == ".md":
        meta, body = render.split_front_matter(text)
        if "title" in meta:
            return meta["title"]
        heading = re.search(r"^#{1,2} +(.+)$", body, re.M)
        return heading.group(1).strip() if heading else path.stem
    lines = text.splitlines()
    for line, under in itertools.pairwise(lines):
        rule = under.strip()
        if (
            line.strip()
            and re.fullmatch(r"([=\-~*#^\"'])\1{2,}", rule)
            and len(rule) >= len(line.strip())
        ):
            return line.strip()
    return path.stem


def _headings(text: str) -> list[str]:
    return [m.strip() for m in re.findall(r"^#{2,3} +(.+)$", text, re.M)][:12]


#: A hand-made template's sidebar lists the first pages of the section (and the current one):
#: a long section (CMake's 680 variables) is not listed whole on every page.
NAV_ITEMS = 30

Bodies = Callable[[Tree, list[str]], list[str]]


def _wrapped(renderer: Bodies, template: str) -> Generator:
    """A generator rendering each file and wrapping it in ``template`` with the section nav."""
    wrap = templates.TEMPLATES[template]

    def generate(tree: Tree) -> dict[str, bytes]:
        titles = {p: _title(tree.root / p, tree.suffix) for p in tree.paths}
        sections: dict[str, list[str]] = {}
        for p in tree.paths:
            sections.setdefault(p.rpartition("/")[0], []).append(p)
        pages: dict[str, bytes] = {}
        for section in sections.values():
            bodies = renderer(tree, section)
            listed = section[:NAV_ITEMS]
            for at, (path, body) in enumerate(zip(section, bodies, strict=True)):
                shown = listed if path in listed else [*listed, path]
                nav = [(titles[p], _href(tree, p)) for p in shown]
                raw = (tree.root / path).read_text(encoding="utf-8", errors="replace")
                page = templates.Page(
                    site=tree.source if tree.source != "readme" else Path(path).parent.name,
                    release=tree.release,
                    path=path,
                    title=titles[path],
                    body=body,
                    nav=nav,
                    headings=_headings(raw),
                    previous=_pager(tree, titles, section, at - 1),
                    next=_pager(tree, titles, section, at + 1),
                    updated=tree.date,
                    repo=tree.repo,
                )
                pages[path] = wrap(page).encode()
        return pages

    return generate


def _href(tree: Tree, path: str) -> str:
    """The served address of a source path: ``{prefix}/{path}`` with ``.html``."""
    return f"{tree.prefix}/{path.rsplit('.', 1)[0]}.html"


def _pager(
    tree: Tree, titles: dict[str, str], section: list[str], at: int
) -> tuple[str, str] | None:
    """The previous or next page's (title, href), if the section has one there."""
    if not 0 <= at < len(section):
        return None
    return titles[section[at]], _href(tree, section[at])


def _read(tree: Tree, path: str) -> str:
    return (tree.root / path).read_text(encoding="utf-8", errors="replace")


def _markdown(name: str) -> Bodies:
    def renderer(tree: Tree, paths: list[str]) -> list[str]:
        texts = [render.split_front_matter(_read(tree, p))[1] for p in paths]
        if name == "pandoc":
            return render.pandoc_many(texts, "gfm")
        return [render.MARKDOWN[name](text) for text in texts]

    return renderer


def _docutils(tree: Tree, paths: list[str]) -> list[str]:
    return [render.docutils_html(tree.root / p)[1] for p in paths]


def _pandoc_rst(tree: Tree, paths: list[str]) -> list[str]:
    """pandoc's reST reader, run in the section's folder so that includes resolve."""
    folder = (tree.root / paths[0]).parent
    return render.pandoc_many([_read(tree, p) for p in paths], "rst", cwd=folder)


def _pandoc_standalone(tree: Tree) -> dict[str, bytes]:
    def one(path: str) -> tuple[str, bytes]:
        _, body = render.split_front_matter(
            (tree.root / path).read_text(encoding="utf-8", errors="replace")
        )
        title = _title(tree.root / path, tree.suffix)
        return path, render.pandoc(body, "gfm", standalone_title=title).encode()

    return dict(map(one, tree.paths))


def _official(tree: Tree) -> dict[str, bytes]:
    """The project's own HTML of each source path (same relative path, ``.html``)."""
    assert tree.official is not None
    pages = {}
    for path in tree.paths:
        built = tree.official / Path(path).with_suffix(".html")
        if built.is_file():
            pages[path] = built.read_bytes()
    return pages


def _mkdocs(theme: str) -> Generator:
    def generate(tree: Tree) -> dict[str, bytes]:
        pages = render.mkdocs_site(tree.root, f"{tree.source} Docs", theme)
        return {p: pages[p] for p in tree.paths if p in pages}

    return generate


def _sphinx(theme: str) -> Generator:
    def generate(tree: Tree) -> dict[str, bytes]:
        updated = tree.date
        pages = render.sphinx_site(
            tree.root, tree.source, tree.release, theme, tree.suffix, updated
        )
        return {p: pages[p] for p in tree.paths if p in pages}

    return generate


GENERATORS: dict[str, Generator] = {
    "official": _official,
    "mkdocs-rtd": _mkdocs("readthedocs"),
    "markdown-it+docusaurus": _wrapped(_markdown("markdown-it"), "docusaurus"),
    "pandoc+jekyll": _wrapped(_markdown("pandoc"), "jekyll"),
    "mistune+docusaurus": _wrapped(_markdown("mistune"), "docusaurus"),
    "python-markdown+jekyll": _wrapped(_markdown("python-markdown"), "jekyll"),
    "python-markdown+readthedocs": _wrapped(_markdown("python-markdown"), "readthedocs"),
    "markdown-it+registry": _wrapped(_markdown("markdown-it"), "registry"),
    "mistune+repository": _wrapped(_markdown("mistune"), "repository"),
    "pandoc-standalone": _pandoc_standalone,
    "sphinx-alabaster": _sphinx("alabaster"),
    "sphinx-classic": _sphinx("classic"),
    "docutils+readthedocs": _wrapped(_docutils, "readthedocs"),
    "pandoc+docusaurus": _wrapped(_pandoc_rst, "docusaurus"),
    "pandoc+jekyll-rst": _wrapped(_pandoc_rst, "jekyll"),
}

#: Which generators build which source.
SITE_GENERATORS: dict[str, tuple[str, ...]] = {
    "npm": (
        "official",
        "mkdocs-rtd",
        "markdown-it+docusaurus",
        "pandoc+jekyll",
        "python-markdown+readthedocs",
    ),
    "node-api": ("official", "mistune+docusaurus", "python-markdown+jekyll"),
    "readme": ("markdown-it+registry", "mistune+repository", "pandoc-standalone"),
    "docutils": ("sphinx-alabaster", "docutils+readthedocs", "pandoc+docusaurus"),
    "click": ("sphinx-alabaster", "docutils+readthedocs"),
    "cmake": ("sphinx-classic", "docutils+readthedocs", "pandoc+jekyll-rst"),
}


# ---- source trees ----------------------------------------------------------------------------


def _unpack(archive: Path, members: str, into: Path) -> Path:
    """Extract the members under ``members`` (a path prefix inside the archive) into ``into``."""
    if not archive.is_file():
        raise MissingTool(
            f"{archive} is missing: run `python tools/build_corpus.py --download "
            f"{archive.parents[1]}` once (see the tool's docstring)"
        )
    with tarfile.open(archive) as tar:
        chosen = [m for m in tar.getmembers() if m.name.startswith(members) and m.isfile()]
        tar.extractall(into, members=chosen, filter="data")
    return into / members


def _paths(
    root: Path, suffix: str, rate: float, key: str, exclude: Sequence[str] = ()
) -> tuple[str, ...]:
    found = []
    for path in sorted(root.rglob(f"*{suffix}")):
        rel = path.relative_to(root).as_posix()
        if any(part in rel for part in exclude) or not sampled(f"{key}:{rel}", rate):
            continue
        found.append(rel)
    return tuple(found)


def trees(cache: Path, work: Path, scale: float) -> Iterator[Tree]:
    """Every source tree, unpacked under ``work`` where it comes from an archive."""
    installed = json.loads((INSTALLED_NPM / "package.json").read_text())["version"]
    for release in (*NPM_RELEASES, installed):
        if release == installed:
            root = INSTALLED_NPM / "docs"
        else:
            root = _unpack(cache / "npm" / f"npm-{release}.tgz", "package/docs", work / release)
        yield Tree(
            "npm",
            release,
            root / "content",
            ".md",
            _paths(root / "content", ".md", 1.0, "npm"),
            "https://github.com/npm/cli",
            official=root / "output",
        )
    node_version = _node_version()
    yield Tree(
        "node-api",
        node_version,
        NODE_API,
        ".md",
        _paths(NODE_API, ".md", min(1.0, scale), "node", ("all.md",)),
        "https://github.com/nodejs/node",
        official=NODE_API,
    )
    yield _readmes()
    for project, releases, suffix in (
        ("docutils", DOCUTILS_RELEASES, ".txt"),
        ("click", CLICK_RELEASES, ".rst"),
    ):
        for release in releases:
            base = f"{project}-{release}"
            root = _unpack(cache / "pypi" / f"{base}.tar.gz", f"{base}/docs", work)
            yield Tree(
                project,
                release,
                root,
                suffix,
                _paths(root, suffix, 1.0, project, ("header", "/rst/demo")),
                REPOS[project],
            )
    yield Tree(
        "cmake",
        "3.25.1",
        CMAKE_HELP,
        ".rst",
        _paths(CMAKE_HELP, ".rst", 0.45 * scale, "cmake", ("release/", "include/")),
        "https://gitlab.kitware.com/cmake/cmake",
    )


def _node_version() -> str:
    html = (NODE_API / "index.html").read_text(encoding="utf-8", errors="replace")
    found = re.search(r"Node\.js (v[\d.]+)", html)
    return found.group(1) if found else "installed"


def _readmes() -> Tree:
    """READMEs of the installed npm packages (npm's own dependencies), one page each."""
    base = Path("/usr/lib/node_modules")
    paths = tuple(
        p.relative_to(base).as_posix()
        for p in sorted(base.rglob("*"))
        if p.name.lower() == "readme.md" and p.is_file() and p.stat().st_size > 600
    )
    return Tree("readme", "installed", base, ".md", paths, "https://github.com/npm/cli")


def site_docs(
    cache: Path,
    scale: float,
    source_trees: Callable[[Path, Path, float], Iterator[Tree]] = trees,
    generators: dict[str, Generator] = GENERATORS,
    site_generators: dict[str, tuple[str, ...]] = SITE_GENERATORS,
) -> Iterator[Doc]:
    """Every page of every site, through the crawler's extractor (the development sites
    unless other trees and generators are given: :func:`corpus_sources.holdout.holdout_docs`)."""
    with tempfile.TemporaryDirectory(prefix="corpus-trees-") as tmp:
        for tree in source_trees(cache, Path(tmp), scale):
            for name in site_generators[tree.source]:
                if name == "official" and tree.official is None:
                    continue
                pages = generators[name](tree)
                host = f"https://{name.replace('+', '.')}.{tree.source}.example"
                kept = 0
                for path, body in sorted(pages.items()):
                    url = f"{host}/{tree.release}/{path.rsplit('.', 1)[0]}.html"
                    doc_id = f"{tree.source}@{tree.release}/{name}:{path}"
                    doc = page_doc(body, url, doc_id, f"site:{tree.source}")
                    if doc is not None:
                        kept += 1
                        yield doc
                logger.info("%s %s %s: %d pages", tree.source, tree.release, name, kept)
