"""Fingerprint version 1: golden values, the reference oracle, determinism, normalisation."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.support.simhash_reference as reference
from dedup_worker.core.simhash import (
    FINGERPRINT_VERSION,
    Document,
    FeatureConfig,
    Fingerprinter,
    from_hex,
    hamming,
    to_hex,
)
from dedup_worker.core.text import content_checksum, normalize, prepare
from dedup_worker.errors import ConfigError

GOLDEN_CHECKSUM_X = "442a44457137672b3218c1007dc8f76a"

# Changing any of these values changes fingerprint version 1: bump FINGERPRINT_VERSION instead.
GOLDEN = [
    ("", "", (), 1, False, "0000000000000000"),
    ("The quick brown fox jumps over the lazy dog.", "", (), 1, False, "524b7326184767b5"),
    ("The quick brown fox jumps over the lazy dog.", "Foxes", ("Jumping",), 1, False, "0809110e19477190"),  # noqa: E501
    ("The quick brown fox jumps over the lazy dog.", "", (), 3, False, "4245cfd35ce63bd7"),
    ("Ｆｕｌｌ-width ＡＢＣ, Straße café, naïve résumé", "", (), 2, False, "b882846183a36412"),
    ("東京都の天気は晴れです。明日は雨でしょう。", "", (), 2, False, "c40877b021372520"),
    ("the cat sat on the mat and the dog ate the bone", "", (), 1, True, "065461ae0cb00887"),
    ("supercalifragilisticexpialidocious antidisestablishmentarianism x", "", (), 4, False, "669034eaec8ab9c3"),  # noqa: E501
]  # fmt: skip


@pytest.mark.parametrize(("text", "title", "headings", "shingle", "stop", "expected"), GOLDEN)
def test_golden_fingerprints(
    text: str, title: str, headings: tuple[str, ...], shingle: int, stop: bool, expected: str
) -> None:
    config = FeatureConfig(shingle=shingle, drop_stop_words=stop)
    assert to_hex(Fingerprinter(config).fingerprint(text, title, headings)) == expected


# Term frequency capped (the default features): each word votes at most ``tf_cap`` times.
GOLDEN_CAPPED = [
    ("", 1, "0000000000000000"),
    ("The quick brown fox jumps over the lazy dog.", 1, "00493106184161b1"),
    ("The quick brown fox jumps over the lazy dog.", 4, "524b7326184767b5"),  # = uncapped
    ("the the the the the the cat the the mat the the", 1, "5add63e61de452a6"),
    ("the the the the the the cat the the mat the the", 4, "5a4b53e6154757b4"),
]


@pytest.mark.parametrize(("text", "cap", "expected"), GOLDEN_CAPPED)
def test_golden_capped_fingerprints(text: str, cap: int, expected: str) -> None:
    config = FeatureConfig(shingle=1, title_weight=0, tf_cap=cap)
    assert to_hex(Fingerprinter(config).fingerprint(text, "a title that does not vote")) == expected


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "eps"]), min_size=1),
    cap=st.integers(1, 6),
    extra=st.integers(1, 5),
)
def test_occurrences_beyond_the_cap_do_not_vote(words: list[str], cap: int, extra: int) -> None:
    """Repeating a word that already occurs ``cap`` times changes nothing; with no cap it
    adds weight (the oracle for the cap is the uncapped fingerprint of the capped text)."""
    capped = Fingerprinter(FeatureConfig(shingle=1, title_weight=0, tf_cap=cap))
    plain = Fingerprinter(FeatureConfig(shingle=1, title_weight=0))
    kept, seen = [], dict.fromkeys(words, 0)
    for word in words:
        seen[word] += 1
        if seen[word] <= cap:
            kept.append(word)
    text = " ".join(words)
    assert capped.fingerprint(text) == plain.fingerprint(" ".join(kept))
    saturated = [w for w, count in seen.items() if count >= cap]
    if saturated:
        longer = text + (" " + saturated[0]) * extra
        assert capped.fingerprint(longer) == capped.fingerprint(text)


def test_version_tag_names_version_and_config() -> None:
    assert FINGERPRINT_VERSION == 1
    assert FeatureConfig().version_tag.startswith("f1")
    assert FeatureConfig(shingle=2).version_tag != FeatureConfig(shingle=3).version_tag
    # A cap names itself; configurations without one keep the tags they always had.
    assert FeatureConfig(shingle=1, title_weight=0, tf_cap=4).version_tag == "f1w1t0h1kc4"
    assert FeatureConfig(shingle=2, title_weight=0).version_tag == "f1w2t0h1k"


def test_same_fingerprint_in_a_fresh_process() -> None:
    # Python's hash() is salted per process; a fresh interpreter proves we never depend on it.
    code = (
        "from dedup_worker.core.simhash import Fingerprinter;"
        "print(Fingerprinter().fingerprint('The quick brown fox jumps over the lazy dog.'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    text = "The quick brown fox jumps over the lazy dog."
    assert int(out.stdout) == Fingerprinter().fingerprint(text)


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300) | st.lists(
    st.sampled_from(["alpha", "Beta", "GAMMA", "δέλτα", "x", "9", "a_b", "---"])
).map(" ".join)
configs = st.builds(
    FeatureConfig,
    shingle=st.integers(1, 5),
    title_weight=st.integers(0, 5),
    heading_weight=st.integers(0, 3),
    drop_stop_words=st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(text=texts, title=texts, headings=st.lists(texts, max_size=3), config=configs)
def test_kernel_matches_reference(
    text: str, title: str, headings: list[str], config: FeatureConfig
) -> None:
    doc = Document(text, title, tuple(headings))
    expected = reference.simhash(doc, config)
    assert Fingerprinter(config).fingerprint_many([doc])[0] == expected


@settings(max_examples=100, deadline=None)
@given(text=texts, title=texts, headings=st.lists(texts, max_size=3), config=configs)
def test_margins_match_reference(
    text: str, title: str, headings: list[str], config: FeatureConfig
) -> None:
    """Each bit's margin is its distance from a tie, as the reference counts the votes."""
    doc = Document(text, title, tuple(headings))
    fps, margins = Fingerprinter(config).fingerprint_margins([doc])
    assert margins.shape == (1, 64)
    assert margins[0].tolist() == reference.margins(doc, config)
    assert fps[0] == reference.simhash(doc, config)


def test_margins_of_a_tie_and_of_a_lead() -> None:
    """One word: every bit is a unanimous vote (margin = its weight). The same word twice
    under a cap of 1 votes once; two different words tie on the bits where they differ."""
    one = Fingerprinter(FeatureConfig(tf_cap=1)).fingerprint_margins(
        [Document("alpha"), Document("alpha alpha"), Document("alpha beta")]
    )[1]
    assert one[0].tolist() == [1] * 64 and one[1].tolist() == [1] * 64
    a, b = (Fingerprinter().fingerprint(w) for w in ("alpha", "beta"))
    assert [int(m) for m in one[2]] == [0 if (a ^ b) >> bit & 1 else 2 for bit in range(64)]


@settings(max_examples=100, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_batch_equals_one_at_a_time(batch: list[str]) -> None:
    fingerprinter = Fingerprinter()
    together = fingerprinter.fingerprint_texts(batch).tolist()
    assert together == [fingerprinter.fingerprint(text) for text in batch]


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=200))
def test_ascii_fast_path_tokenises_like_the_unicode_path(text: str) -> None:
    assert reference.words(prepare(text)) == [w.encode() for w in normalize(text).split()]


def test_case_width_and_punctuation_do_not_matter() -> None:
    fingerprinter = Fingerprinter()
    a = fingerprinter.fingerprint("Hello, World! Straße")
    assert a == fingerprinter.fingerprint("hello world strasse")
    assert a == fingerprinter.fingerprint("ＨＥＬＬＯ   world... STRASSE")


def test_small_edit_gives_small_distance_and_different_text_large() -> None:
    fingerprinter = Fingerprinter(FeatureConfig(shingle=1))
    words = [f"word{i % 97}x{i % 13}" for i in range(900)]
    edited = words.copy()
    edited[400] = "changed"
    base = fingerprinter.fingerprint(" ".join(words))
    assert hamming(base, fingerprinter.fingerprint(" ".join(edited))) <= 3
    other = fingerprinter.fingerprint(" ".join(f"other{i}" for i in range(900)))
    assert hamming(base, other) > 10


def test_title_weight_changes_fingerprint() -> None:
    text = "alpha beta gamma delta epsilon"
    heavy = Fingerprinter(FeatureConfig(title_weight=8)).fingerprint(text, "zeta eta theta")
    light = Fingerprinter(FeatureConfig(title_weight=0)).fingerprint(text, "zeta eta theta")
    assert light == Fingerprinter().fingerprint(text)
    assert heavy != light


@pytest.mark.parametrize("bad", [{"shingle": 0}, {"shingle": 9}, {"title_weight": -1}])
def test_bad_config_is_rejected(bad: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        FeatureConfig(**bad)


def test_hex_round_trip_and_errors() -> None:
    assert from_hex(to_hex(2**64 - 1)) == 2**64 - 1
    assert to_hex(0) == "0000000000000000" and to_hex(0x5A4B) == "0000000000005a4b"
    with pytest.raises(ValueError, match="16 hex digits"):
        from_hex("abc")


@given(st.integers(0, 2**64 - 1))
def test_hex_is_sixteen_lowercase_digits(fingerprint: int) -> None:
    assert to_hex(fingerprint) == format(fingerprint, "016x")


def test_checksum_ignores_whitespace_only() -> None:
    assert content_checksum("a  b\n c") == content_checksum("a b c")
    assert content_checksum("a b c") != content_checksum("A b c")
    assert content_checksum("x") == GOLDEN_CHECKSUM_X


@given(
    st.text(alphabet=st.sampled_from(list("ab \n\t\r\x0b\x0c\x1c\x1fé\u00a0\u2003")), max_size=60)
    | st.text(max_size=60)
)
def test_whitespace_fast_path_equals_split_join(text: str) -> None:
    import unicodedata

    from dedup_worker.core.text import canonical_whitespace

    assert canonical_whitespace(text) == " ".join(unicodedata.normalize("NFC", text).split())


_SPACED = st.text(alphabet=st.sampled_from(list("ab \n\t\r\x0b\x0c\x1c\x1fé\u00a0")), max_size=40)


@given(st.lists(_SPACED | st.text(max_size=40), max_size=8))
def test_batch_checksums_equal_the_checksum_of_the_split_joined_text(texts: list[str]) -> None:
    """The batch kernel (regular, irregular and non-ASCII texts mixed) and the definition."""
    import hashlib
    import unicodedata

    from dedup_worker.core.text import content_checksums

    def definition(text: str) -> str:
        canonical = " ".join(unicodedata.normalize("NFC", text).split())
        return hashlib.blake2b(
            canonical.encode("utf-8", "surrogatepass"), digest_size=16
        ).hexdigest()

    assert content_checksums(texts) == [definition(t) for t in texts]
    assert content_checksums(texts) == [content_checksum(t) for t in texts]


def test_threads_fingerprinting_at_once_get_the_same_answers() -> None:
    # Each thread packs batches into its own reused buffer; none may see another's bytes.
    from concurrent.futures import ThreadPoolExecutor

    fingerprinter = Fingerprinter(FeatureConfig(shingle=2))
    batches = [[f"doc {b} {i} " + "word " * (i % 50) for i in range(200)] for b in range(8)]
    expected = [fingerprinter.fingerprint_texts(batch).tolist() for batch in batches]
    with ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(3):
            got = list(pool.map(lambda b: fingerprinter.fingerprint_texts(b).tolist(), batches))
            assert got == expected
