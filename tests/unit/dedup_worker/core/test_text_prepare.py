"""``text.prepare`` on non-ASCII text: the kernel must see exactly the words of ``normalize``."""

from __future__ import annotations

import random
import unicodedata
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.support.simhash_reference as reference
from dedup_worker.core._unicode_kernel import (
    NEEDS_NFKC,
    character_fold,
    non_ascii_tokens,
    plain_punctuation,
    word_table,
)
from dedup_worker.core.text import _CharacterFolds, normalize, prepare

# Every code point but the surrogates (text from the wire is valid UTF-8).
unicode_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=300)
# Mostly ASCII prose with a sprinkling of what real pages carry: the common case.
web_text = st.lists(
    st.sampled_from(
        ["word", "Straße", "naïve", "ＦＵＬＬ", "²", "ﬁle", "\u00a0", "©", "—", "“q”", "…", "é",
         "İstanbul", "ß", "_", "a_b", "3.14", "Ⅻ", "١٢٣", "😀", "\u0301", "x\u0301", " ", "\n",
         "=\u0338", "\u0338", "\u1100", "\u1161", "\t", "\x1c", "ǅ", "Σ", "ς"]
    ),
    max_size=60,
).map("".join)  # fmt: skip
unspaced_text = st.lists(
    st.sampled_from(["日本語", "テキスト", "한국어", "中文", "word", " ", "、", "。", "Ａ"]),
    max_size=20,
).map("".join)


def kernel_words(text: str) -> list[bytes]:
    return reference.words(prepare(text))


def normalized_words(text: str) -> list[bytes]:
    return [word.encode() for word in normalize(text).split()]


@settings(max_examples=300, deadline=None)
@given(unicode_text)
def test_any_text_tokenises_like_normalize(text: str) -> None:
    assert kernel_words(text) == normalized_words(text)


@settings(max_examples=300, deadline=None)
@given(web_text)
def test_web_text_tokenises_like_normalize(text: str) -> None:
    assert kernel_words(text) == normalized_words(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(web_text, st.integers(0, 80)), max_size=8))
def test_long_pages_folded_in_pieces_tokenise_like_normalize(
    pieces: list[tuple[str, int]],
) -> None:
    """Non-ASCII tokens far apart (more than ``MERGE_GAP`` bytes of ASCII between them) are
    folded separately; the words are still those of the whole text."""
    text = "".join(piece + " filler" * gap + "\n" for piece, gap in pieces)
    assert kernel_words(text) == normalized_words(text)


def test_a_mostly_ascii_page_is_folded_token_by_token() -> None:
    filler = " plain ASCII words between them" * 20
    text = f"CAFÉ{filler} ﬁle=\u0338x Straße{filler}\nİstanbul\u00a0x\u0301"
    spans = non_ascii_tokens(np.frombuffer(text.encode(), dtype=np.uint8)).tolist()
    assert len(spans) == 6  # three pieces, far apart: folded one by one
    assert kernel_words(text) == normalized_words(text)


@settings(max_examples=100, deadline=None)
@given(unspaced_text)
def test_unspaced_scripts_give_one_token_per_character(text: str) -> None:
    assert kernel_words(text) == normalized_words(text)


def test_a_page_with_typographic_punctuation() -> None:
    text = "© 2026 — “Near-duplicates” cost a crawl…\u00a0naïve_Straße ﬁle"
    assert kernel_words(text) == [
        b"2026", b"near", b"duplicates", b"cost", b"a", b"crawl", "naïve".encode(),
        b"strasse", b"file",
    ]  # fmt: skip


def test_the_word_table_is_what_re_calls_a_word_character() -> None:
    table = word_table()
    codes = np.arange(table.size)
    # str.isalnum is re's alphanumeric test; the underscore is a separator for the fingerprint.
    expected = np.fromiter(
        (chr(c).isalnum() for c in range(table.size)), dtype=np.uint8, count=table.size
    )
    expected[ord("_")] = 0
    mismatched = codes[table != expected]
    assert mismatched.size == 0, [hex(c) for c in mismatched[:10]]


def test_plain_punctuation_never_composes_with_its_neighbours() -> None:
    """What lets ``prepare`` skip NFKC: a plain punctuation character normalises to the same
    non-word characters beside letters or beside itself as alone (planes 0-2 and 14: every
    assigned character that is not CJK; the rest is unassigned or private)."""
    codepoints = [
        cp
        for cp in [*range(0x80, 0x30000), *range(0xE0000, 0xE1000)]
        if not 0xD800 <= cp < 0xE000 and plain_punctuation(cp)
    ]
    assert len(codepoints) > 1000 and plain_punctuation(0xA0) and not plain_punctuation(0x2122)
    chars = [chr(cp) for cp in codepoints]
    alone = [unicodedata.normalize("NFKC", c) for c in chars]
    for context in ("a{0}b", "é{0}{0}", "{0}z"):
        together = unicodedata.normalize("NFKC", "\n".join(context.format(c, c) for c in chars))
        expected = "\n".join(context.format(a, a) for a in alone)
        assert together == expected, context
    assert all(not any(word_table()[ord(x)] for x in a) for a in alone)


def test_a_character_folded_alone_folds_alike_beside_any_other() -> None:
    """What lets ``prepare`` fold a text one distinct character at a time: every character
    ``character_fold`` accepts has the same NFKC image, case-folded, beside letters, beside
    itself and beside every other such character (planes 0-2 and 14, in code point order
    and shuffled), and the characters it refuses include the combining marks and the
    Hangul vowels."""
    codepoints = [
        cp
        for cp in [*range(0x80, 0x30000), *range(0xE0000, 0xE1000)]
        if not 0xD800 <= cp < 0xE000 and character_fold(cp) is not None
    ]
    assert len(codepoints) > 100_000
    assert character_fold(0x301) is None and character_fold(0x1161) is None
    assert character_fold(0xC9) == ("É".encode(), "é".encode())
    assert character_fold(0xFB01) == ("ﬁ".encode(), b"fi")
    chars = [chr(cp) for cp in codepoints]
    images = {c: unicodedata.normalize("NFKC", c).casefold() for c in chars}
    shuffled = random.Random(7).sample(chars, len(chars))
    for order in (chars, shuffled):
        for context in ("a{0}b", "é{0}{0}", "{0}z"):
            text = "\n".join(context.format(c) for c in order)
            expected = "\n".join(context.format(images[c]) for c in order)
            assert unicodedata.normalize("NFKC", text).casefold() == expected, context
        together = unicodedata.normalize("NFKC", "".join(order)).casefold()
        assert together == "".join(images[c] for c in order)


def test_a_page_folded_by_character_has_the_words_of_normalize() -> None:
    text = "CAFÉ\u00a0Ｆｕｌｌ ﬁle Straße İstanbul ǅ Σίσυφος " * 30 + "Ⅻ²"
    assert kernel_words(text) == normalized_words(text)


def test_the_character_table_folds_a_page_in_one_pass_and_refuses_composing_characters() -> None:
    folds = _CharacterFolds()
    text = "CAFÉ\u00a0Ｆｕｌｌ ﬁle Straße — “½” 日本"
    folded = folds.fold(text.encode())
    assert folded is not None and reference.words(folded) == normalized_words(text)
    assert folds.learnt == len({c for c in text if ord(c) > 127})
    assert folds.fold("x\u0301".encode()) is None  # a combining mark: NFKC of the whole text
    assert folds.fold_at[0x301] == NEEDS_NFKC


def test_characters_beyond_the_tables_bound_take_the_general_path() -> None:
    folds = _CharacterFolds()
    folds._LEARNT_AT_MOST = 2
    assert folds.fold("é ß".encode()) is not None
    assert folds.fold("é ß ñ".encode()) is None  # ñ is not learnt: the page is folded whole
    assert folds.learnt == 2 and folds.fold_at[ord("ñ")] == NEEDS_NFKC
    text = "é ß ñ Ñ"
    assert kernel_words(text) == normalized_words(text)


def test_threads_learning_characters_at_once_fold_alike() -> None:
    """Learning replaces the images before it points entries at them, so a pass running in
    another thread sees a character as learnt only with its image there."""
    pages = [
        "".join(chr(cp) for cp in range(lo, lo + 300)) + " word" for lo in range(0xC0, 0x3000, 97)
    ]
    folds = _CharacterFolds()
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(folds.fold, (p.encode() for p in pages * 3)))
    alone = [_CharacterFolds().fold(p.encode()) for p in pages]
    assert together == alone * 3


def test_the_table_pass_finds_a_character_at_every_offset_of_an_eight_byte_word() -> None:
    """ASCII runs are skipped eight bytes at a time: a character after any run length, at the
    end or right at the start of the text, is still replaced (and the bytes around it kept)."""
    folds = _CharacterFolds()
    for run in range(20):
        for char in ("É", "\u00a0", "ﬁ", "😀", "—"):
            for text in ("a" * run + char, char + "b" * run, "A" * run + char + "c" * run + char):
                folded = folds.fold(text.encode())
                assert folded is not None
                assert reference.words(folded) == normalized_words(text), (run, char, text)
