"""Synthetic English-like documents for benchmarks: Zipfian words, punctuation, capitals.

Deterministic for a given seed, so figures are comparable between runs.
"""

from __future__ import annotations

import numpy as np

_LETTERS = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", dtype=np.uint8)
_LETTER_P = np.array(
    [
        12.7,
        9.1,
        8.2,
        7.5,
        7.0,
        6.7,
        6.3,
        6.1,
        6.0,
        4.3,
        4.0,
        2.8,
        2.8,
        2.4,
        2.4,
        2.2,
        2.0,
        2.0,
        1.9,
        1.5,
        1.0,
        0.8,
        0.15,
        0.15,
        0.1,
        0.07,
    ]
)


def vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    """``size`` distinct pseudo-words; shorter words are the frequent ones, as in English."""
    probabilities = _LETTER_P / _LETTER_P.sum()
    seen: set[str] = set()
    words: list[str] = []
    while len(words) < size:
        # Frequent words are short; the running text averages ~4.7 letters a word, as English.
        length = int(min(16, max(1, rng.gamma(3.0, 1.7) * (0.95 + 1.0 * len(words) / size))))
        word = bytes(rng.choice(_LETTERS, size=length, p=probabilities)).decode()
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def documents(count: int, words_per_doc: int = 900, seed: int = 7) -> list[str]:
    """``count`` documents of ``words_per_doc`` Zipf-distributed words with punctuation."""
    rng = np.random.default_rng(seed)
    vocab = vocabulary(50_000, rng)
    ranks = np.arange(1, len(vocab) + 1)
    weights = 1.0 / ranks**1.05
    weights /= weights.sum()
    cumulative = np.cumsum(weights)
    docs = []
    for _ in range(count):
        picks = np.searchsorted(cumulative, rng.random(words_per_doc) * cumulative[-1])
        picks = np.minimum(picks, len(vocab) - 1)
        out = []
        capital = True
        for i, index in enumerate(picks):
            word = vocab[index]
            out.append(word.capitalize() if capital else word)
            capital = False
            if i % 13 == 12:
                out[-1] += "."
                capital = True
            elif i % 7 == 6:
                out[-1] += ","
        docs.append(" ".join(out))
    return docs
