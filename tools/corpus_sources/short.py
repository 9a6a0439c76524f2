"""Short pages (150-300 words of real text) and their edited variants.

A *window* is a run of whole lines of a real document (a stdlib module's docstrings, a man page)
holding 150-300 words. It is published as a small HTML page (a light template), and so are one
or more variants of it, each made by one of the edits common on real sites:

* ``word``: one word replaced by another word of the same page;
* ``stamp``: a line "Last updated <date> · <N> visitors" appended;
* ``restamp``: the stamped page with another date and counter (paired with ``stamp``);
* ``edits``: 3-10 word edits (replacements, insertions, deletions), scattered or as one
  rewritten phrase, so that resemblance straddles 0.9.

Edits are the only synthetic part: the text is real. Every choice is a stable hash of the
window's key, so the corpus is the same on every build. Ids: ``short:{source}/{key}#{variant}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from html import escape

from corpus_sources import templates
from corpus_sources.common import Doc, page_doc, stable_fraction, stable_int

MIN_WORDS, MAX_WORDS = 150, 300
SITES = {"pydoc": "Python module reference", "man": "Linux manual pages"}


def window(text: str, key: str) -> list[str] | None:
    """Whole lines of ``text`` holding 150-300 words (the count drawn from ``key``), starting at
    a line drawn from ``key``; None when the text is too short."""
    lines = [line.strip() for line in text.splitlines()]
    target = stable_int("len:" + key, MIN_WORDS, MAX_WORDS)
    total = sum(len(line.split()) for line in lines)
    if total < target:
        return None
    # Start early enough that the window can be filled.
    budget, last_start = 0, 0
    for i in range(len(lines) - 1, -1, -1):
        budget += len(lines[i].split())
        if budget >= target:
            last_start = i
            break
    start = stable_int("start:" + key, 0, last_start)
    chosen: list[str] = []
    count = 0
    for line in lines[start:]:
        words = line.split()
        if count + len(words) > target and count >= MIN_WORDS:
            break
        chosen.append(line)
        count += len(words)
    return chosen if MIN_WORDS <= count <= MAX_WORDS else None


def _words(lines: list[str]) -> list[tuple[int, int]]:
    """(line, word) positions of every word."""
    return [(i, j) for i, line in enumerate(lines) for j in range(len(line.split()))]


def replace_word(lines: list[str], key: str) -> list[str]:
    """One word replaced by another word of the page (a different one)."""
    positions = _words(lines)
    vocabulary = sorted({w for line in lines for w in line.split() if w.isalpha()})
    i, j = positions[stable_int("at:" + key, 0, len(positions) - 1)]
    words = lines[i].split()
    choices = [w for w in vocabulary if w.lower() != words[j].lower()] or ["changed"]
    words[j] = choices[stable_int("by:" + key, 0, len(choices) - 1)]
    return [*lines[:i], " ".join(words), *lines[i + 1 :]]


def stamp(key: str) -> str:
    """A "last updated / visitors" line with a date and a counter drawn from ``key``."""
    year = stable_int("y:" + key, 2019, 2025)
    month = stable_int("m:" + key, 1, 12)
    day = stable_int("d:" + key, 1, 28)
    visitors = stable_int("v:" + key, 120, 98_000)
    return f"Last updated {year}-{month:02d}-{day:02d} · {visitors:,} visitors"


def edit_words(lines: list[str], key: str) -> list[str]:
    """3-10 word edits: scattered replacements/insertions/deletions, or one rewritten phrase."""
    words = [w for line in lines for w in line.split()]
    vocabulary = sorted(set(words))
    count = stable_int("n:" + key, 3, 10)
    if stable_fraction("phrase:" + key) < 0.5:
        start = stable_int("at:" + key, 0, len(words) - count)
        fresh = [
            vocabulary[stable_int(f"w{k}:{key}", 0, len(vocabulary) - 1)] for k in range(count)
        ]
        words[start : start + count] = fresh
    else:
        for k in range(count):
            at = stable_int(f"at{k}:{key}", 0, len(words) - 1)
            kind = stable_int(f"kind{k}:{key}", 0, 2)
            word = vocabulary[stable_int(f"w{k}:{key}", 0, len(vocabulary) - 1)]
            if kind == 0:
                words[at] = word
            elif kind == 1:
                words.insert(at, word)
            elif len(words) > MIN_WORDS:
                del words[at]
    return _rewrap(words, lines)


def _rewrap(words: list[str], like: list[str]) -> list[str]:
    """``words`` in lines of the same lengths as ``like`` (the last line takes the rest)."""
    out: list[str] = []
    at = 0
    for line in like[:-1]:
        size = len(line.split())
        out.append(" ".join(words[at : at + size]))
        at += size
    out.append(" ".join(words[at:]))
    return out


def variants(lines: list[str], key: str) -> dict[str, list[str]]:
    """The original and two or three of its variants (which ones drawn from ``key``)."""
    out = {"orig": lines}
    pick = stable_int("variants:" + key, 0, 5)
    kinds = (
        ("word", "stamp"),
        ("word", "edits"),
        ("stamp", "edits"),
        ("edits", "edits2"),
        ("word", "stamp"),
        ("stamp", "edits"),
    )[pick]
    for kind in kinds:
        if kind == "word":
            out["word"] = replace_word(lines, key)
        elif kind == "stamp":
            out["stamp"] = [*lines, stamp("a:" + key)]
            out["restamp"] = [*lines, stamp("b:" + key)]
        else:
            out[kind] = edit_words(lines, f"{kind}:{key}")
    return out


def html_page(lines: list[str], title: str, site: str, template: str) -> bytes:
    paragraphs: list[str] = []
    current: list[str] = []
    for line in [*lines, ""]:
        if line:
            current.append(escape(line))
        elif current:
            paragraphs.append("<p>" + "<br>".join(current) + "</p>")
            current = []
    page = templates.Page(site=site, release="", path="", title=title, body="".join(paragraphs))
    return templates.TEMPLATES[template](page).encode()


def short_docs(sources: Iterable[tuple[str, str, str, str]]) -> Iterator[Doc]:
    """Pages for (source, key, title, text) documents: a window of each and its variants."""
    for source, key, title, text in sources:
        lines = window(text, key)
        if lines is None:
            continue
        template = "plain" if stable_fraction("tpl:" + key) < 0.6 else "jekyll"
        slug = key.replace("/", "_")
        for variant, page_lines in variants(lines, key).items():
            body = html_page(page_lines, title, SITES[source], template)
            url = f"https://{source}-{variant}.short.example/{slug}.html"
            doc = page_doc(body, url, f"short:{source}/{key}#{variant}", f"short:{source}")
            if doc is not None:
                yield doc
