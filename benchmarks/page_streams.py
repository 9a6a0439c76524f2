"""Endless streams of distinct page messages for the long-running benchmarks (soak, growth).

Two ways to make more pages than a corpus holds:

- ``recombined`` (the default): page i joins the first half of one text and the second half
  of another. Every page then shares half its text with a number of others that grows with
  the stream (two per ``len(texts)`` pages): the worst case for a simhash of the whole page,
  as on a site whose pages are mostly template.
- ``renamed`` (a corpus only): pass e of the corpus (pages ``e * n`` to ``e * n + n - 1``)
  repeats its texts in order with every word that is not common in the corpus renamed for
  that pass (a suffix of letters, the same for the whole pass). The common words (those in at
  least ``COMMON_SHARE`` of the texts) are kept, so every pass is written in the same language
  and biases the fingerprint bits as the corpus does; within a pass the corpus's own
  near-duplicates (mirrors, releases) recur as they are, and no page shares more than its
  common words with a page of another pass. A crawl of many sites looks like this.
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

from bench_worker import key_of, real_texts
from synthetic_text import documents

STREAMS = ("recombined", "renamed")
#: A word kept across passes of ``renamed`` appears in at least this share of the texts.
#: Calibrated on the development corpus (``tools/build_corpus.py``): at 0.5 the kept words are
#: 28% of the words, and a text and its renamed copy lie a median 25 bits apart, as two different
#: texts of one source family do (25; 26 for any two texts). At 0.01 only 12% of the words
#: change and the copies lie a median 8 bits apart (34% within the search radius of 6): edits
#: of one page, not different pages.
COMMON_SHARE = 0.5
_WORD = re.compile(r"\w+")
MARK = "\ue000"  # a private-use character: never in a corpus text, replaced before sending


class Pages:
    """Page messages made on the fly, one per index ``i`` (see the module's docstring)."""

    def __init__(
        self,
        docs: int = 2000,
        words: int = 900,
        corpus: Path | None = None,
        stream: str = "recombined",
    ) -> None:
        if stream not in STREAMS:
            raise SystemExit(f"unknown stream {stream!r}: choose one of {', '.join(STREAMS)}")
        if stream == "renamed" and corpus is None:
            raise SystemExit("the renamed stream needs --corpus (real texts)")
        texts = documents(docs, words_per_doc=words) if corpus is None else real_texts(corpus)
        self.stream = stream
        self.halves = [(d[: len(d) // 2], d[len(d) // 2 :]) for d in texts]
        self.templates = marked(texts) if stream == "renamed" else []

    def text(self, i: int) -> str:
        if self.stream == "renamed":
            n = len(self.templates)
            return self.templates[i % n].replace(MARK, suffix(i // n))
        n = len(self.halves)
        return self.halves[i % n][0] + " " + self.halves[(i * 7 + i // n) % n][1]

    def body(self, i: int) -> bytes:
        """The page message, with ``%FETCHED%`` where ``bench_worker.stamp`` puts the time."""
        host = key_of(i).decode()
        page = {
            "schema": "neardup.page/1",
            "url": f"https://{host}/p{i}",
            "host": host,
            "fetched_at": 0.0,
            "status": 200,
            "title": f"page {i}",
            "text": self.text(i),
            "outlinks": [],
            "depth": 1,
        }
        return json.dumps(page).replace('"fetched_at": 0.0', '"fetched_at": %FETCHED%').encode()


def marked(texts: list[str]) -> list[str]:
    """Each text with ``MARK`` after every word that is not common in ``texts``."""
    frequency: collections.Counter[str] = collections.Counter()
    for text in texts:
        frequency.update({w.casefold() for w in _WORD.findall(text)})
    floor = COMMON_SHARE * len(texts)
    common = {w for w, count in frequency.items() if count >= floor}

    def mark(match: re.Match[str]) -> str:
        word = match.group()
        return word if word.casefold() in common else word + MARK

    return [_WORD.sub(mark, text) for text in texts]


def suffix(epoch: int) -> str:
    """Letters naming pass ``epoch`` (empty for the first: the corpus as it is)."""
    if epoch == 0:
        return ""
    letters = []
    while epoch:
        epoch, digit = divmod(epoch, 26)
        letters.append(chr(ord("a") + digit))
    return "zq" + "".join(letters)
