"""Held-out pages in other languages: translated man pages, three renderers and short edits.

    apt-get install manpages-de manpages-fr manpages-pl manpages-ru manpages-ja manpages-zh \
        mandoc groff
    python tools/build_corpus.py OUT --families languages

Every other family is English, so nothing showed how the fingerprint and the sketch fare on
text whose words are long compounds (German), inflected (Polish, Russian: Cyrillic) or not
separated by spaces at all (Japanese, Chinese: one token a character, so shingles are
character n-grams). Debian's translated man pages are real text in those languages. Of each
sampled page:

* **renderer mirrors**: three hosts render the same troff source, as man-page sites do:
  groff's own HTML page (``groff -Thtml``), mandoc's body in a Read the Docs-like template and
  pandoc's in a Jekyll-like one. The renderers differ in what they keep (groff's table of
  contents, mandoc's header table, pandoc's section layout) and in spacing (groff puts a space
  between Japanese characters);
* **short pages**: a window of 150-300 tokens of its text with the edits of the ``short``
  family (one word replaced, a "last updated" line, 3-10 edits). In Japanese and Chinese a
  token is a character, so the window is 150-300 characters and an edit changes characters.

Sources are ``mirror:<lang>`` and ``short:<lang>``; ids ``mirror:<lang>/<section>/<page>#<host>``
and ``short:<lang>/<section>/<page>#<variant>``. Nothing here was used to tune the detector.
"""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from html import escape
from pathlib import Path

from corpus_sources import short, templates
from corpus_sources.common import Doc, MissingTool, page_doc, sampled, stable_fraction
from corpus_sources.original import troff_text

MAN = Path("/usr/share/man")
#: Language folder -> Debian package; Chinese comes in two scripts.
LANGUAGES = {
    "de": "manpages-de",
    "fr": "manpages-fr",
    "pl": "manpages-pl",
    "ru": "manpages-ru",
    "ja": "manpages-ja",
    "zh_CN": "manpages-zh",
    "zh_TW": "manpages-zh",
}
SECTIONS = ("man1", "man5", "man7", "man8")
#: Share of each language's pages sampled (at scale 1.0: 28-111 pages a language, 491 in all).
RATE = 0.1
#: Characters written without spaces: one token each (as ``text.normalize`` splits them).
_UNSPACED = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff])")
_BETWEEN = re.compile(
    r"(?<=[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]) "
    r"(?=[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff])"
)
HOSTS = ("groff", "mandoc", "pandoc")


def check_tools() -> None:
    missing = sorted({pkg for lang, pkg in LANGUAGES.items() if not (MAN / lang).is_dir()})
    missing += [tool for tool in ("mandoc", "pandoc") if shutil.which(tool) is None]
    if shutil.which("groff") is None or not _run(["groff", "-Thtml"], ".TH T 1\n"):
        missing.append("groff")
    if missing:
        raise MissingTool(f"the languages family needs: apt-get install {' '.join(missing)}")


def pages(scale: float) -> Iterator[tuple[str, str, str]]:
    """(language, section/name, troff source) of every sampled translated page, sorted."""
    for lang in LANGUAGES:
        for section in SECTIONS:
            for path in sorted((MAN / lang / section).glob("*.gz")):
                if path.is_symlink() or not sampled(f"{lang}/{path.name}", RATE * scale):
                    continue
                source = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
                if not source.lstrip().startswith(".so "):  # not a redirect to another page
                    yield lang, f"{section}/{path.name.removesuffix('.gz')}", source


def _run(args: list[str], source: str) -> str:
    # In a folder of its own: groff's HTML device writes a PNG per table or equation there.
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            args, input=source.encode(), capture_output=True, check=False, cwd=scratch
        )
    return done.stdout.decode("utf-8", errors="replace") if done.returncode == 0 else ""


def render(host: str, lang: str, name: str, source: str) -> str:
    """The page ``host`` serves for one man page ("" when its renderer fails on it)."""
    if host == "groff":
        return _run(["groff", "-Thtml", "-mandoc", "-Kutf8"], source)
    if host == "mandoc":
        body = _run(["mandoc", "-Thtml", "-Ofragment"], source)
        template = "readthedocs"
    else:
        body = _run(["pandoc", "-f", "man", "-t", "html5", "--wrap=none"], source)
        template = "jekyll"
    if not body:
        return ""
    title = name.rpartition("/")[2]
    page = templates.Page(
        site=f"man-pages ({lang})", release="4.18.1", path=name, title=title, body=body
    )
    return templates.TEMPLATES[template](page)


def _tokens(line: str) -> str:
    """``line`` with a space around each unspaced character, so a word is a token."""
    return " ".join(_UNSPACED.sub(r" \1 ", line).split())


def _untokens(line: str) -> str:
    return _BETWEEN.sub("", line)


def short_pages(lang: str, name: str, source: str) -> Iterator[Doc]:
    """A 150-300-token window of the page and its edited variants (``short`` family)."""
    key = f"{lang}/{name}"
    lines = short.window("\n".join(_tokens(x) for x in troff_text(source).splitlines()), key)
    if lines is None:
        return
    template = "plain" if stable_fraction("tpl:" + key) < 0.6 else "jekyll"
    for variant, page_lines in short.variants(lines, key).items():
        text = [_untokens(line) for line in page_lines]
        body = short.html_page(text, name.rpartition("/")[2], f"man-pages ({lang})", template)
        url = f"https://{variant}.short.{lang}.example/{name}.html"
        doc = page_doc(body, url, f"short:{key}#{variant}", f"short:{lang}")
        if doc is not None:
            yield doc


def write_sites(out: Path, scale: float) -> dict[str, int]:
    """The mirrors as crawlable folders (``build_corpus.py --sites DIR --languages``): one host
    per renderer and language (``groff.de``, ``mandoc.de``...), each page at
    ``/<section>/<page>.html`` and a home page listing them by section. Pages written per host."""
    check_tools()
    listed: dict[str, dict[str, list[str]]] = {}  # host -> section -> page paths
    for lang, name, source in pages(scale):
        for host in HOSTS:
            body = render(host, lang, name, source)
            if not body or page_doc(body.encode(), "https://x.example/", "", "") is None:
                continue
            site = f"{host}.{lang}"
            path = out / site / f"{name}.html"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body, encoding="utf-8")
            section, _, page = name.partition("/")
            listed.setdefault(site, {}).setdefault(section, []).append(page)
    for site, sections in listed.items():
        parts = "".join(
            f"<h2>{escape(section)}</h2><ul>"
            + "".join(f'<li><a href="/{section}/{p}.html">{escape(p)}</a></li>' for p in names)
            + "</ul>"
            for section, names in sorted(sections.items())
        )
        (out / site / "index.html").write_text(
            f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{escape(site)}</title>'
            f"</head><body><h1>{escape(site)}: manual pages</h1>{parts}</body></html>",
            encoding="utf-8",
        )
    return {site: sum(map(len, sections.values())) + 1 for site, sections in listed.items()}


def docs(scale: float) -> Iterator[Doc]:
    check_tools()
    for lang, name, source in pages(scale):
        for host in HOSTS:
            body = render(host, lang, name, source)
            url = f"https://{host}.{lang}.example/{name}.html"
            doc = page_doc(body.encode(), url, f"mirror:{lang}/{name}#{host}", f"mirror:{lang}")
            if doc is not None:
                yield doc
        yield from short_pages(lang, name, source)
