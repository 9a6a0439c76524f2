"""Renderers: Markdown and reStructuredText to HTML, file by file or as a whole generated site.

File renderers return the body HTML of one document (a template wraps it); site generators
(MkDocs, Sphinx) build a whole site from a source tree and return every page as the generator
wrote it, with its own theme. Missing tools raise :class:`MissingTool` naming what to install:
the Python ones are the ``corpus`` extra (``pip install -e '.[corpus]'``), pandoc is the Debian
package ``pandoc``.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from corpus_sources.common import MissingTool

_FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.S)
CORPUS_EXTRA = "pip install -e '.[corpus]'"


def split_front_matter(text: str) -> tuple[dict[str, str], str]:
    """YAML front matter (flat ``key: value`` lines) and the Markdown after it."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return {}, text
    meta: dict[str, str] = {}
    for line in match.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep and not key.startswith(" "):
            meta[key.strip()] = value.strip().strip("\"'")
    return meta, text[match.end() :]


def _require(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise MissingTool(
            f"the corpus needs the Python package {module!r}: {CORPUS_EXTRA}"
        ) from None


# ---- Markdown --------------------------------------------------------------------------------


def python_markdown(text: str) -> str:
    """Python-Markdown with the "extra" extensions (tables, fenced code, footnotes...)."""
    markdown = _require("markdown")
    return str(markdown.markdown(text, extensions=["extra", "sane_lists"]))


@functools.cache
def _markdown_it() -> Any:
    _require("markdown_it")
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")


def markdown_it(text: str) -> str:
    """markdown-it-py, CommonMark with GFM tables and strikethrough."""
    return str(_markdown_it().render(text))


@functools.cache
def _mistune() -> Any:
    mistune = _require("mistune")
    return mistune.create_markdown(escape=False, plugins=["table", "strikethrough", "url"])


def mistune(text: str) -> str:
    """mistune 3 with its table, strikethrough and autolink plugins."""
    return str(_mistune()(text))


def pandoc(
    text: str, reader: str, standalone_title: str | None = None, cwd: Path | None = None
) -> str:
    """pandoc (``gfm`` or ``rst`` reader) to HTML5: the body, or with ``standalone_title`` the
    whole page in pandoc's default template."""
    if shutil.which("pandoc") is None:
        raise MissingTool("the corpus needs pandoc: apt-get install pandoc")
    args = ["pandoc", "-f", reader, "-t", "html5", "--wrap=none"]
    if standalone_title is not None:
        args += ["-s", "--toc", "--metadata", f"title={standalone_title}"]
    done = subprocess.run(args, input=text.encode(), capture_output=True, check=False, cwd=cwd)
    return done.stdout.decode("utf-8", errors="replace")


_SPLIT = "<!--corpus-page-break-->"
_SPLIT_MARKUP = {"gfm": f"\n\n{_SPLIT}\n\n", "rst": f"\n\n.. raw:: html\n\n   {_SPLIT}\n\n"}


def pandoc_many(
    texts: list[str], reader: str, cwd: Path | None = None, batch: int = 40
) -> list[str]:
    """``pandoc(text, reader)`` of each text, ``batch`` documents per pandoc run (a run costs
    ~0.2 s to start): the documents are joined with a raw-HTML marker and the output split at
    it. A batch whose marker count comes out wrong (a document swallowed the marker, e.g. in
    an unclosed code fence) is rendered file by file instead."""
    out: list[str] = []
    for start in range(0, len(texts), batch):
        chunk = texts[start : start + batch]
        parts = pandoc(_SPLIT_MARKUP[reader].join(chunk), reader, cwd=cwd).split(_SPLIT)
        if len(parts) != len(chunk):
            parts = [pandoc(text, reader, cwd=cwd) for text in chunk]
        out.extend(parts)
    return out


MARKDOWN: dict[str, Callable[[str], str]] = {
    "python-markdown": python_markdown,
    "markdown-it": markdown_it,
    "mistune": mistune,
}


# ---- reStructuredText ------------------------------------------------------------------------

_DIRECTIVE = re.compile(r"^\s*\.\. ([A-Za-z][\w:.+-]*)::", re.M)
_ROLE = re.compile(r"(?<![\w`]):([A-Za-z][\w:.+-]*):`")


def markup_names(texts: Iterable[str]) -> tuple[set[str], set[str]]:
    """The directive and role names used in some reST sources."""
    directive_names: set[str] = set()
    role_names: set[str] = set()
    for text in texts:
        directive_names.update(_DIRECTIVE.findall(text))
        role_names.update(_ROLE.findall(text))
    return directive_names, role_names


def lenient_markup(directive_names: Iterable[str], role_names: Iterable[str]) -> None:
    """Register a generic directive and role for every name docutils does not know, as a site
    built with the project's own extensions would show them: a directive's arguments as a
    signature line and its content as body text, a role's text (its title for ``t <target>``).
    """
    from docutils.parsers.rst import directives, roles

    from corpus_sources import lenient

    for name in directive_names:
        if name not in directives._directives and name not in directives._directive_registry:
            directives.register_directive(name, lenient.GenericDirective)
    for name in role_names:
        if name not in roles._roles and name not in roles._role_registry:
            roles.register_local_role(name, lenient.generic_role)


_DOCUTILS_SETTINGS = {
    "report_level": 5,
    "math_output": "LaTeX",
    "halt_level": 5,
    "warning_stream": False,
    "file_insertion_enabled": True,
    "raw_enabled": True,
    "syntax_highlight": "none",
    "input_encoding": "utf-8",
    "embed_stylesheet": False,
}


def docutils_html(path: Path) -> tuple[str, str]:
    """(title, body HTML with its title) of one reST file, by docutils' HTML5 writer."""
    _require("docutils")
    from docutils.core import publish_parts

    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        parts = publish_parts(
            text,
            source_path=str(path),
            writer_name="html5",
            settings_overrides=_DOCUTILS_SETTINGS,
        )
    except Exception:  # a source docutils cannot take at all: a site would not publish it
        return "", ""
    return str(parts["title"]), str(parts["html_body"])


# ---- site generators -------------------------------------------------------------------------


def mkdocs_site(docs: Path, site_name: str, theme: str) -> dict[str, bytes]:
    """Build ``docs`` (a folder of Markdown) with MkDocs; {source path: page HTML}."""
    _require("mkdocs")
    with tempfile.TemporaryDirectory(prefix="corpus-mkdocs-") as tmp:
        config = Path(tmp, "mkdocs.yml")
        config.write_text(
            f"site_name: {site_name}\ndocs_dir: {docs}\nsite_dir: {tmp}/site\n"
            f"theme:\n  name: {theme}\nuse_directory_urls: false\n"
            "markdown_extensions:\n  - toc:\n      permalink: true\n  - tables\n"
            "  - fenced_code\n  - admonition\n"
        )
        _run([sys.executable, "-m", "mkdocs", "build", "-q", "-f", str(config)], "mkdocs")
        return _collect(Path(tmp, "site"), docs, ".md")


def sphinx_site(
    source: Path, project: str, release: str, theme: str, suffix: str, updated: str
) -> dict[str, bytes]:
    """Build ``source`` (a reST tree with ``index``) with Sphinx and ``theme``, unknown
    directives and roles shown leniently; {source path: page HTML}. Themes that show "last
    updated" show ``updated`` (never the build date: the corpus is the same on every build)."""
    _require("sphinx")
    tools = Path(__file__).parents[1]
    with tempfile.TemporaryDirectory(prefix="corpus-sphinx-") as tmp:
        args = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-C", "-j", "1"]
        for setting in (
            "extensions=corpus_sources.lenient",
            f"project={project}",
            f"release={release}",
            f"version={release}",
            f"html_theme={theme}",
            f"source_suffix={suffix}",
            "root_doc=index",
            f"html_last_updated_fmt={updated.replace('%', '%%')}",
            "exclude_patterns=_build",
        ):
            args += ["-D", setting]
        env_path = f"{tools}"
        _run([*args, str(source), tmp], "sphinx", env_path)
        return _collect(Path(tmp), source, suffix)


def _run(args: list[str], what: str, pythonpath: str | None = None) -> None:
    import os

    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(args, capture_output=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed: {done.stderr.decode(errors='replace')[-2000:]}")


def _collect(site: Path, source: Path, suffix: str) -> dict[str, bytes]:
    """{source path relative to ``source``: the built page} for every source with a page."""
    pages: dict[str, bytes] = {}
    for path in sorted(source.rglob(f"*{suffix}")):
        rel = path.relative_to(source)
        built = site / rel.with_suffix(".html")
        if built.is_file():
            pages[rel.as_posix()] = built.read_bytes()
    return pages
