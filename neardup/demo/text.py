"""Deterministic, readable-looking filler text with a large vocabulary.

Pages must be long and varied enough that a 64-bit simhash separates different pages by far
more than k=3 bits while a few changed words move it by at most 3: each generated word is drawn
from a vocabulary of ~4000 pronounceable pseudo-words with a Zipf-like distribution, like a
natural language, from a seeded PRNG (same seed, same text, on every machine).
"""

from __future__ import annotations

import random
from functools import lru_cache

_ONSETS = [
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "br",
    "cl",
    "dr",
    "gr",
    "pl",
    "st",
    "tr",
    "sh",
    "ch",
    "th",
]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou"]
_CODAS = ["", "", "n", "r", "s", "l", "m", "t", "nd", "st"]


@lru_cache(maxsize=1)
def vocabulary() -> tuple[str, ...]:
    rng = random.Random(20070508)  # the WWW 2007 paper's conference week
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < 4000:
        syllables = rng.choice((1, 2, 2, 3, 3, 4))
        word = "".join(
            rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    return tuple(words)


@lru_cache(maxsize=1)
def _weights() -> tuple[float, ...]:
    # Flatter than natural language: shared common words would pull all pages together.
    return tuple(1.0 / (rank + 400) for rank in range(len(vocabulary())))


def words(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return rng.choices(vocabulary(), weights=_weights(), k=count)


def paragraphs(seed: int, count: int, per_paragraph: int = 90) -> list[str]:
    """``count`` paragraphs of sentences (capitalised, full stops) from one seed."""
    rng = random.Random(seed * 7919 + 1)
    body = words(seed, count * per_paragraph)
    result = []
    for p in range(count):
        chunk = body[p * per_paragraph : (p + 1) * per_paragraph]
        sentences, start = [], 0
        while start < len(chunk):
            end = start + rng.randint(8, 18)
            sentence = " ".join(chunk[start:end])
            sentences.append(sentence[:1].upper() + sentence[1:] + ".")
            start = end
        result.append(" ".join(sentences))
    return result


def title(seed: int) -> str:
    return " ".join(w.capitalize() for w in words(seed + 1_000_003, 4))
