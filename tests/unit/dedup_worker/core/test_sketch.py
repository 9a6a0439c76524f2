"""Sketch version 1: golden values, the fused kernel, the estimator, Broder's super-shingles."""

from __future__ import annotations

import hashlib
import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup_worker.core import sketch
from dedup_worker.core.simhash import Document, FeatureConfig, Fingerprinter
from dedup_worker.core.sketch import (
    DEFAULT_SKETCH,
    SketchConfig,
    Sketcher,
    estimate,
    estimate_rows,
    sketch_count,
    verify,
    verify_many,
)
from dedup_worker.errors import ConfigError
from neardup.evaluation import quality
from neardup.evaluation.minhash import (
    MinHasher,
    SuperShingleConfig,
    match_probability,
    minhash_estimates,
    super_shingles,
)

FOX = "The quick brown fox jumps over the lazy dog."
TEXTS = [
    "",
    FOX,
    FOX + " " + FOX * 4 + " And then it rests.",
    "Ｆｕｌｌ-width ＡＢＣ, Straße café, naïve résumé",
    "東京都の天気は晴れです。明日は雨でしょう。",
    "one two three",
]

# Changing any of these changes sketch version 1: bump SKETCH_VERSION instead.
GOLDEN_DEFAULT = [  # 1024 two-bit bins
    ("01a10000", "f8b9b1ca4b677f02"),
    ("01a10600", "f1ba7a431269de6d"),
    ("01a12e00", "fc48f38e21fd5f72"),
    ("01a10400", "205a4ea38ce19e5c"),
    ("01a11000", "2a96bd29cb311ad1"),
    ("01a10100", "3bb1d0a16d7d727c"),
]
GOLDEN_256_BINS_1_BIT = [  # the default before (36 bytes)
    ("01800000", "3f44474aa316c0df"),
    ("01800600", "af7f071ebce7d580"),
    ("01802e00", "759ecde912db57fa"),
    ("01800400", "98bad7ecd43e79d4"),
    ("01801000", "99825cdd9a9897fb"),
    ("01800100", "48d15a983eafcee8"),
]
GOLDEN_512_BINS_2_BITS = [  # (header hex, blake2b-64 of the whole sketch)
    ("01910000", "08f8899bfab7003c"),
    ("01910600", "696bcafbbf53873e"),
    ("01912e00", "e7c3a5ad2eaeee28"),
    ("01910400", "56ef49640fe15952"),
    ("01911000", "c0c73c5fd8444af9"),
    ("01910100", "593a7115c18c9ea5"),
]
GOLDEN_16_BINS_8_BITS = [
    "01430000ffffffffffffffffffffffffffffffff",
    "01430600e5a18ba1e5608ba16087e50f0f0f8787",
    "01432e0020a18ba1e58e8ba16087e55252528787",
    "01430400c35151c322c3c3c3c3c3515122515122",
    "01431000946df137796c7e2a373679c1ae2af16d",
    "01430100e9e9e9e9e9e9e9e9e9e9e9e9e9e9e9e9",
]


def _sketches(texts: list[str], config: SketchConfig = DEFAULT_SKETCH) -> list[bytes]:
    return Sketcher(config).sketch_many([Document(t) for t in texts])


def test_golden_sketches() -> None:
    got = _sketches(TEXTS, SketchConfig(log2_bins=9, bits=2))
    assert [(s[:4].hex(), hashlib.blake2b(s, digest_size=8).hexdigest()) for s in got] == (
        GOLDEN_512_BINS_2_BITS
    )
    default = _sketches(TEXTS)
    assert [(s[:4].hex(), hashlib.blake2b(s, digest_size=8).hexdigest()) for s in default] == (
        GOLDEN_DEFAULT
    )
    assert [s.hex() for s in _sketches(TEXTS, SketchConfig(log2_bins=4, bits=8))] == (
        GOLDEN_16_BINS_8_BITS
    )
    small = _sketches(TEXTS, SketchConfig(log2_bins=8, bits=1))
    assert [(s[:4].hex(), hashlib.blake2b(s, digest_size=8).hexdigest()) for s in small] == (
        GOLDEN_256_BINS_1_BIT
    )


def test_golden_minhash_and_super_shingles() -> None:
    signature = MinHasher(4).signatures([FOX])[0]
    assert [f"{int(v):016x}" for v in signature] == [
        "45b14404d4fd3731",
        "4bd1dd4e9ae66604",
        "0d16a0605ec690d0",
        "07e901da63c5c927",
    ]
    supers = super_shingles(MinHasher(84).signatures([FOX]), SuperShingleConfig())
    assert supers[0, :2].tolist() == [12497434259248625010, 3496583881202174711]


def test_same_sketch_in_a_fresh_process() -> None:
    code = (
        "from dedup_worker.core.sketch import Sketcher;"
        f"print(Sketcher().sketch_texts([{FOX!r}])[0].tobytes().hex())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == _sketches([FOX])[0].hex()


def test_header_names_format_and_count() -> None:
    sketch = _sketches([FOX])[0]
    assert len(sketch) == DEFAULT_SKETCH.nbytes == 260
    assert sketch[1] == DEFAULT_SKETCH.format_byte
    assert sketch_count(sketch) == 6  # nine words, six 4-shingles


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(max_size=80), st.text(max_size=12), st.lists(st.text(max_size=10), max_size=2)
        ),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(
        [
            FeatureConfig(),
            FeatureConfig(shingle=3),
            FeatureConfig(title_weight=0),
            FeatureConfig(shingle=2, drop_stop_words=True, heading_weight=3),
        ]
    ),
)
def test_fused_kernel_matches_separate_ones(
    docs: list[tuple[str, str, list[str]]], features: FeatureConfig
) -> None:
    documents = [Document(text, title, tuple(heads)) for text, title, heads in docs]
    sketcher = Sketcher(SketchConfig(log2_bins=6, bits=4), features)
    fingerprints, rows = sketcher.fingerprint_and_sketch(documents)
    assert fingerprints.tolist() == Fingerprinter(features).fingerprint_many(documents).tolist()
    assert [r.tobytes() for r in rows] == sketcher.sketch_many(documents)


def _variant(words: list[str], changes: int, rng: random.Random) -> str:
    out = list(words)
    for _ in range(changes):
        out[rng.randrange(len(out))] = f"changed{rng.randrange(10**6)}"
    return " ".join(out)


@pytest.mark.parametrize(
    "config",
    [DEFAULT_SKETCH, SketchConfig(log2_bins=8, bits=4), SketchConfig(log2_bins=7, bits=16)],
)
def test_estimate_tracks_true_resemblance(config: SketchConfig) -> None:
    rng = random.Random(5)
    words = [f"w{rng.randrange(5000)}" for _ in range(900)]
    texts = [" ".join(words)] + [_variant(words, c, rng) for c in (0, 5, 15, 40, 120, 400)]
    sketches = _sketches(texts, config)
    sets = quality.shingle_sets(texts)
    others = np.arange(1, len(texts), dtype=np.int64)
    truth = quality.jaccard(sets, np.zeros_like(others), others)
    estimates = [estimate(sketches[0], s) for s in sketches[1:]]
    assert estimates[0] == 1.0
    assert np.abs(np.array(estimates) - truth).max() < 0.08
    rows = np.frombuffer(b"".join(sketches), np.uint8).reshape(len(texts), -1)
    batch = estimate_rows(rows, np.zeros_like(others), others)
    assert batch.tolist() == pytest.approx(estimates)


def test_verify_is_symmetric_and_thresholded() -> None:
    rng = random.Random(2)
    words = [f"w{rng.randrange(5000)}" for _ in range(900)]
    same, close, far = _sketches(
        [" ".join(words), _variant(words, 2, rng), _variant(words, 200, rng)]
    )
    assert verify(same, close)[0] and verify(close, same) == verify(same, close)
    assert not verify(same, far)[0]
    strict = SketchConfig(threshold=1.0)
    assert not verify(same, close, strict)[0]
    guarded = SketchConfig(short_shingles=2000, short_threshold=1.0)  # every page counts as short
    assert not verify(same, close, guarded)[0]


def test_empty_pages_and_mismatched_formats() -> None:
    empty, fox = _sketches(["", FOX])
    assert estimate(empty, empty) == 1.0
    assert estimate(empty, fox) == 0.0
    other = _sketches([FOX], SketchConfig(log2_bins=8, bits=4))[0]
    with pytest.raises(ValueError, match="formats"):
        estimate(fox, other)


@pytest.mark.parametrize(
    "config",
    [SketchConfig(log2_bins=b, bits=w) for b, w in ((10, 2), (8, 4), (9, 1), (6, 8), (5, 16))],
)
def test_verify_many_is_verify_of_each_pair(config: SketchConfig) -> None:
    """The batch form gives exactly ``verify``'s verdicts and estimates (bit for bit), empty
    pages included; pairs of mixed formats fall back to ``verify`` and its error."""
    rng = random.Random(5)
    words = [f"w{rng.randrange(3000)}" for _ in range(400)]
    texts = ["", " ".join(words), *(_variant(words, n, rng) for n in (1, 3, 10, 30, 100, 400))]
    rows = _sketches(texts, config)
    pairs = [(a, b) for a in rows for b in rows]
    expected = [verify(a, b, config) for a, b in pairs]
    assert verify_many(pairs, config) == expected
    assert any(v[0] for v in expected) and not all(v[0] for v in expected)
    assert verify_many([], config) == []
    other = _sketches([FOX], SketchConfig(log2_bins=9, bits=2))[0]
    with pytest.raises(ValueError, match="formats"):
        verify_many([*pairs[:3], (rows[1], other)], config)


def test_config_validation() -> None:
    with pytest.raises(ConfigError):
        SketchConfig(bits=3)
    with pytest.raises(ConfigError):
        SketchConfig(log2_bins=2)
    with pytest.raises(ConfigError):
        SuperShingleConfig(groups=2, match=3)


def test_super_shingle_probability() -> None:
    config = SuperShingleConfig(groups=6, size=14, match=2)
    assert match_probability(1.0, config) == pytest.approx(1.0)
    assert match_probability(0.0, config) == 0.0
    values = [match_probability(j / 10, config) for j in range(11)]
    assert values == sorted(values)
    assert 0.35 < match_probability(0.9, config) < 0.5  # Broder's filter is strict at 0.9


def test_minhash_estimates_resemblance() -> None:
    rng = random.Random(3)
    words = [f"w{rng.randrange(5000)}" for _ in range(900)]
    texts = [" ".join(words), _variant(words, 30, rng)]
    signatures = MinHasher(256).signatures(texts)
    truth = quality.jaccard(quality.shingle_sets(texts), np.array([0]), np.array([1]))[0]
    got = minhash_estimates(signatures, np.array([0]), np.array([1]))[0]
    assert abs(got - truth) < 0.08


def test_version_tag_names_the_shape() -> None:
    assert DEFAULT_SKETCH.version_tag == "s1b10x2"
    assert SketchConfig(log2_bins=11, bits=1).version_tag == "s1b11x1"


@pytest.mark.parametrize(
    ("config", "ok"),
    [
        (SketchConfig(), True),  # 1024 x 2 bits: +-0.013 at 0.85
        (SketchConfig(log2_bins=10, bits=1), True),  # +-0.0165, just under 0.05 / 3
        (SketchConfig(log2_bins=11, bits=1), True),
        (SketchConfig(log2_bins=8, bits=1), False),  # the old 36-byte default: +-0.033
        (SketchConfig(log2_bins=9, bits=2), False),
        (SketchConfig(log2_bins=8, bits=1, threshold=0.5), True),  # a wide gap: 0.25
        (SketchConfig(log2_bins=10, bits=2, threshold=0.97), False),  # a narrow one: 0.015
    ],
)
def test_sketch_must_separate_the_threshold(config: SketchConfig, ok: bool) -> None:
    if ok:
        config.check_precision()
    else:
        with pytest.raises(ConfigError, match=r"too small for the threshold.*use at least"):
            config.check_precision()


def test_standard_error_matches_the_estimator() -> None:
    """The formula behind check_precision against the estimator on long pages (>> bins)."""
    rng = random.Random(3)
    config = SketchConfig(log2_bins=9, bits=1)
    words = [f"w{rng.randrange(10**6)}" for _ in range(6000)]
    texts = [" ".join(words)] + [_variant(words, 110, rng) for _ in range(150)]
    sketches = _sketches(texts, config)
    truth = quality.jaccard(
        quality.shingle_sets(texts), np.zeros(150, dtype=np.int64), np.arange(1, 151)
    )
    errors = [estimate(sketches[0], s) - j for s, j in zip(sketches[1:], truth, strict=True)]
    expected = config.standard_error(float(np.mean(truth)))
    assert 0.7 * expected < float(np.std(errors)) < 1.3 * expected


@pytest.mark.parametrize("bits", [1, 2, 4, 8, 16])
def test_scalar_correction_is_the_array_one_bit_for_bit(bits: int) -> None:
    """``estimate`` corrects one pair in Python floats; it must equal the numpy rule exactly
    (the evaluation's batch estimates and the worker's verdicts would otherwise disagree)."""
    for bins in (64, 256, 1024, 2048):
        same = np.arange(bins + 1)
        expected = sketch._corrected(same, bins, bits).tolist()
        assert [sketch._corrected_one(int(s), bins, bits) for s in same] == expected
