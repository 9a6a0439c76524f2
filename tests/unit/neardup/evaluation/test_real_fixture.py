"""The fixtures of real near-duplicates of the hard kind (tests/fixtures/quality_real and
tests/fixtures/quality_holdout).

A subset of the development corpus built by ``tools/build_corpus.py --fixture-real``, drawn
only from the new families: documentation pages rendered by several generators into several
site templates (renderer mirrors), consecutive releases of the same docs, pages of one site
sharing a template, and short pages (150-300 words of stdlib docstrings or man pages) with one
word replaced, a "last updated / visitors" line, or 3-10 edits. Labels are the exact reference
(Jaccard of word 4-shingles >= 0.9); ``pairs.jsonl`` also lists the near misses (0.8-0.9).

Floors sit 0.03 below the measured values (in the comments). The previous default (word-pair
fingerprints, k=3, a 36-byte sketch) loses its recall here: pairs 4-12 bits apart. Today's
default finds them; what it gets wrong are pairs within ~0.02 of the threshold (every false
positive measured has J 0.875-0.892 and an estimate 0.90-0.92), which this fixture holds far
more densely than real sites do (on the whole development corpus: page P/R 0.984/0.974).

``quality_holdout`` is the same kind of subset (``build_corpus.py OUT --families holdout
--fixture-real DIR``) of the held-out sites (``tools/corpus_sources/holdout.py``): Flask,
Werkzeug, Jinja, pytest, Black and attrs docs, partly by generators the development corpus does
not use, never looked at while the detector was tuned. Its floors check that the figures above
are not fitted to the development corpus. ``quality_holdout2`` is the same of the second
held-out set (``--families holdout2``: coverage.py, mypy, trio, urllib3, packaging and pip
docs, built on 29 Nov after the first set had led to changes of the crawler).
``quality_languages`` (``--families languages``, 30 Nov) is the only one not in English:
Debian's translated man pages in German, French, Polish, Russian, Japanese and Chinese, each
rendered by groff, mandoc and pandoc into three hosts, and short windows of them with the short
family's edits (in Japanese and Chinese a token is a character). Its mirrors are where the
default loses most (groff's table of contents at the top of its page puts the pairs at J
0.90-0.93, 7-8 bits apart; the same loss on English man pages): the flipped probes (30 Nov)
took its page recall from 0.898 to 0.930, and the floors pin that, still below the goal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest

from dedup_worker.core.simhash import Document
from neardup.evaluation import detectors, quality
from tests.support.paths import FIXTURES

DEFAULT = (  # the engine's default (test_quality_floors checks it is)
    "hybrid:title_weight=0,shingle=1,tf_cap=4,k=8,tables=3,replicas=2,flips=1,bins=1024,bits=2,"
    "threshold=0.9"
)
PREVIOUS = "hybrid:title_weight=0,shingle=2,k=3,bins=256,bits=1,threshold=0.9"


@dataclass(frozen=True)
class Floors:
    """Page and pair precision / recall floors of one detector on one fixture."""

    page_p: float
    page_r: float
    pair_p: float
    pair_r: float


#: Per fixture: the default's floors and the previous default's (measured - 0.03).
FLOORS = {
    # measured (30 Nov, k=8 with a flip): default page 0.948 / 0.954, pair 0.933 / 0.940
    # (k=6 without: 0.952 / 0.919, 0.934 / 0.904);
    # previous default page 0.991 / 0.636, pair 0.974 / 0.537
    "quality_real": (Floors(0.91, 0.92, 0.90, 0.91), Floors(0.96, 0.60, 0.94, 0.50)),
    # measured (30 Nov): default page 0.977 / 0.970, pair 0.981 / 0.966 (k=6 without a flip,
    # 28 Nov: 0.977 / 0.970, 0.980 / 0.942); previous default page 0.988 / 0.632, pair
    # 0.924 / 0.529
    "quality_holdout": (Floors(0.94, 0.94, 0.95, 0.93), Floors(0.95, 0.60, 0.89, 0.49)),
    # measured (30 Nov): default page 0.980 / 0.952, pair 0.966 / 0.905 (k=6 without a flip,
    # 29 Nov: 0.980 / 0.943, 0.965 / 0.873); previous default page 0.973 / 0.686, pair
    # 0.936 / 0.557
    "quality_holdout2": (Floors(0.95, 0.92, 0.93, 0.87), Floors(0.94, 0.65, 0.90, 0.52)),
    # measured (30 Nov): default page 0.976 / 0.930, pair 0.971 / 0.913 (k=6 without a flip:
    # 0.975 / 0.898, 0.970 / 0.869); previous default page 0.983 / 0.517, pair 0.972 / 0.434
    "quality_languages": (Floors(0.94, 0.90, 0.94, 0.88), Floors(0.95, 0.48, 0.94, 0.40)),
}
FIXTURE_NAMES = sorted(FLOORS)
#: The held-out fixtures' projects: none of them is in the development corpus or the other set.
HELD_OUT_SOURCES = {
    "quality_holdout": {
        f"site:{p}" for p in ("flask", "werkzeug", "jinja2", "pytest", "black", "attrs")
    },
    "quality_holdout2": {
        f"site:{p}" for p in ("coverage", "mypy", "trio", "urllib3", "packaging", "pip")
    },
    "quality_languages": {
        f"{family}:{lang}"
        for family in ("mirror", "short")
        for lang in ("de", "fr", "pl", "ru", "ja", "zh_CN", "zh_TW")
    },
}
#: Pairs at J 0.8-0.9 and at 0.9-0.95 each fixture holds at least (the second held-out set
#: is the smallest: 818 pages, 232 pairs at 0.9-0.95 in all).
HARD_CASE_PAIRS = {
    "quality_real": 100,
    "quality_holdout": 100,
    "quality_holdout2": 80,
    "quality_languages": 100,
}


@cache
def _corpus(fixture: str) -> tuple[list[str], list[str], list[Document]]:
    ids, sources, documents = [], [], []
    for line in (FIXTURES / fixture / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        ids.append(row["id"])
        sources.append(row["source"])
        documents.append(Document(row["text"], row["title"]))
    return ids, sources, documents


@cache
def _sets(fixture: str) -> quality.ShingleSets:
    return quality.shingle_sets([d.text for d in _corpus(fixture)[2]])


@cache
def _labels(fixture: str) -> quality.Labels:
    return quality.make_labels(len(_corpus(fixture)[0]), quality.similar_pairs(_sets(fixture)))


def _listed(fixture: str) -> list[dict[str, object]]:
    text = (FIXTURES / fixture / "pairs.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


@cache
def _scores(fixture: str, spec: str) -> tuple[quality.Score, quality.Score]:
    matched = detectors.run(detectors.parse_spec(spec), _corpus(fixture)[2]).matched()
    labels = _labels(fixture)
    return (
        quality.score_pages(matched.left, matched.right, labels),
        quality.score_pairs(matched.left, matched.right, labels),
    )


def test_fixture_is_small_and_from_the_new_families() -> None:
    assert sum(p.stat().st_size for p in (FIXTURES / "quality_real").iterdir()) < 2_000_000
    ids, sources, _ = _corpus("quality_real")
    assert len(set(ids)) == len(ids)
    assert all(s.startswith(("site:", "short:")) for s in sources)
    assert {s.split(":")[0] for s in sources} == {"site", "short"}


@pytest.mark.parametrize("fixture", sorted(HELD_OUT_SOURCES))
def test_held_out_fixture_is_small_and_shares_no_project_with_the_others(fixture: str) -> None:
    assert sum(p.stat().st_size for p in (FIXTURES / fixture).iterdir()) < 2_000_000
    ids, sources, _ = _corpus(fixture)
    assert len(set(ids)) == len(ids)
    assert set(sources) == HELD_OUT_SOURCES[fixture]
    for other in FIXTURE_NAMES:
        if other != fixture:
            assert not set(sources) & set(_corpus(other)[1]), other


@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_labels_recomputed_exactly_agree_with_pairs_jsonl(fixture: str) -> None:
    ids, _, _ = _corpus(fixture)
    index = {ident: i for i, ident in enumerate(ids)}
    listed = _listed(fixture)
    positives = {
        tuple(sorted((index[str(r["a"])], index[str(r["b"])]))) for r in listed if r["label"]
    }
    labels = _labels(fixture)
    recomputed = {(int(k) // len(ids), int(k) % len(ids)) for k in labels.positive_keys.tolist()}
    assert positives == recomputed
    # Every listed resemblance (positives and near misses) is the exact one.
    left = np.array([min(index[str(r["a"])], index[str(r["b"])]) for r in listed])
    right = np.array([max(index[str(r["a"])], index[str(r["b"])]) for r in listed])
    exact = quality.jaccard(_sets(fixture), left, right)
    assert np.allclose(exact, [float(str(r["jaccard"])) for r in listed], atol=1e-6)
    assert all(
        (j >= quality.THRESHOLD) == bool(r["label"]) for j, r in zip(exact, listed, strict=True)
    )


@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_fixture_holds_the_hard_case(fixture: str) -> None:
    values = np.array([float(str(r["jaccard"])) for r in _listed(fixture)])
    near_misses = int(((values >= 0.8) & (values < 0.9)).sum())
    close_positives = int(((values >= 0.9) & (values < 0.95)).sum())
    assert near_misses >= HARD_CASE_PAIRS[fixture] and close_positives >= HARD_CASE_PAIRS[fixture]


def _figures(name: str, page: quality.Score, pair: quality.Score) -> str:
    return (
        f"{name}: page P/R {page.precision:.3f}/{page.recall:.3f}"
        f", pair P/R {pair.precision:.3f}/{pair.recall:.3f}"
    )


def _assert_floors(name: str, scores: tuple[quality.Score, quality.Score], floors: Floors) -> None:
    page, pair = scores
    figures = _figures(name, page, pair)
    assert page.precision >= floors.page_p and page.recall >= floors.page_r, figures
    assert pair.precision >= floors.pair_p and pair.recall >= floors.pair_r, figures


@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_default_floors(fixture: str) -> None:
    _assert_floors(f"default on {fixture}", _scores(fixture, DEFAULT), FLOORS[fixture][0])


@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_previous_default_floors_and_what_it_misses(fixture: str) -> None:
    previous = _scores(fixture, PREVIOUS)
    _assert_floors(f"previous default on {fixture}", previous, FLOORS[fixture][1])
    now, _ = _scores(fixture, DEFAULT)
    assert now.recall - previous[0].recall > 0.2, "today's default finds pairs 4-12 bits apart"
