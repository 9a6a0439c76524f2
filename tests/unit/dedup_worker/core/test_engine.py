"""The decision rule on in-memory backends: verdicts, races, replays, against an oracle."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup_worker.contract.messages import Decision, Page, Verdict
from dedup_worker.core.design import build_design
from dedup_worker.core.engine import DedupEngine, EngineSettings
from dedup_worker.core.index_api import agrees_on_a_key, rule_masks
from dedup_worker.core.memory_index import InMemoryIndex
from dedup_worker.core.records import MemoryDocStore, page_id
from dedup_worker.core.simhash import Document, FeatureConfig, Fingerprinter, hamming
from dedup_worker.core.sketch import Sketcher, verify

WORDS = [f"w{i}" for i in range(5000)]


def text(seed: int, edits: int = 0, n: int = 300) -> str:
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(n)]
    for e in range(edits):
        words[rng.randrange(n)] = f"edit{seed}x{e}"
    return " ".join(words)


def near_copy(seed: int, within: int = 2) -> str:
    """``text(seed)`` with one word changed, at the first position that keeps the default
    fingerprint within ``within`` bits (whether a given edit does is up to the hash)."""
    fingerprint = Fingerprinter(EngineSettings().features).fingerprint
    base = text(seed)
    words = base.split()
    for position in range(len(words)):
        edited = " ".join([*words[:position], f"edit{seed}", *words[position + 1 :]])
        if hamming(fingerprint(base), fingerprint(edited)) <= within:
            return edited
    raise AssertionError("no close edit found")


def page(url: str, body: str, at: float, depth: int = 1, links: tuple[str, ...] = ()) -> Page:
    return Page(url=url, host=url.split("/")[2], fetched_at=at, text=body, outlinks=links,
                depth=depth)  # fmt: skip


def engine(k: int = 3) -> DedupEngine:
    return DedupEngine(
        InMemoryIndex(build_design(k, (k + 1,))), MemoryDocStore(), EngineSettings(k=k)
    )


def final_verdicts(decisions: list[Decision]) -> dict[tuple[str, float], Decision]:
    """The state a consumer ends with: corrections win; otherwise the last decision."""
    state: dict[tuple[str, float], Decision] = {}
    for d in decisions:
        key = (d.url, d.fetched_at)
        if key in state and state[key].corrects and not d.corrects:
            continue
        state[key] = d
    return state


def test_every_verdict() -> None:
    e = engine()
    base = text(1)
    out = e.process([
        page("http://a.test/1", base, 10.0, links=("http://a.test/x",)),
        page("http://b.test/1", base, 11.0),                      # same text: exact duplicate
        page("http://c.test/1", near_copy(1), 12.0),              # one word changed: near dup
        page("http://d.test/1", text(2), 13.0),                   # different: unique
    ])  # fmt: skip
    assert [d.verdict for d in out] == [
        Verdict.UNIQUE, Verdict.EXACT_DUPLICATE, Verdict.NEAR_DUPLICATE, Verdict.UNIQUE
    ]  # fmt: skip
    assert out[0].follow_outlinks and out[0].outlinks == ("http://a.test/x",)
    assert out[1].duplicate_of == out[2].duplicate_of == "http://a.test/1"
    assert not out[2].follow_outlinks and out[2].outlinks == () and out[2].priority == 0.0
    assert out[2].distance is not None and out[2].distance <= 3
    again = e.process([
        page("http://a.test/1", base, 20.0, links=("http://a.test/x",)),  # revisit, same text
        page("http://d.test/1", text(3), 21.0),                   # revisit, new text
    ])  # fmt: skip
    assert [d.verdict for d in again] == [Verdict.UNCHANGED, Verdict.CHANGED]
    # Unchanged new content is followed again, after new pages (a recrawl goes on past it).
    assert again[0].distance == 0 and again[0].duplicate_of is None
    assert again[0].follow_outlinks and again[0].outlinks == ("http://a.test/x",)
    assert 0 < again[0].priority < again[1].priority
    assert again[1].follow_outlinks and again[1].distance is not None and again[1].distance > 3


def test_an_unchanged_revisit_keeps_its_previous_fetchs_standing() -> None:
    """A recrawl with the index of an earlier crawl: new content stays followed, a duplicate
    stays a duplicate of the same original (its outlinks unfollowed), through any number of
    unchanged revisits; a revisit that changed is decided afresh."""
    e = engine()
    base, links = text(31), ("http://m.test/deeper",)
    first = e.process([
        page("http://o.test/doc", base, 1.0, links=links),
        page("http://m.test/doc", near_copy(31), 2.0, links=links),
    ])  # fmt: skip
    assert [d.verdict for d in first] == [Verdict.UNIQUE, Verdict.NEAR_DUPLICATE]
    for at in (10.0, 20.0):  # two recrawls: the second sees the first one's unchanged records
        again = e.process([
            page("http://o.test/doc", base, at, links=links),
            page("http://m.test/doc", near_copy(31), at + 1, links=links),
        ])  # fmt: skip
        assert [d.verdict for d in again] == [Verdict.UNCHANGED, Verdict.UNCHANGED]
        kept, mirror = again
        assert kept.follow_outlinks and kept.outlinks == links and kept.duplicate_of is None
        assert not mirror.follow_outlinks and mirror.outlinks == () and mirror.priority == 0.0
        assert mirror.duplicate_of == "http://o.test/doc"
        assert mirror.evidence["suppressed_outlinks"] == 1
    changed = e.process([page("http://m.test/doc", text(32), 30.0, links=links)])
    assert [d.verdict for d in changed] == [Verdict.CHANGED] and changed[0].follow_outlinks


def test_an_unchanged_revisit_in_the_batch_of_its_previous_fetch() -> None:
    """The previous fetch's record is still pending there: its outcome in the batch counts."""
    e = engine()
    e.process([page("http://o.test/doc", text(33), 1.0)])
    out = e.process([
        page("http://m.test/doc", near_copy(33), 3.0),    # the revisit first in the batch
        page("http://m.test/doc", near_copy(33), 2.0),
        page("http://n.test/doc", text(34), 3.0),
        page("http://n.test/doc", text(34), 2.0),
    ])  # fmt: skip
    assert [d.verdict for d in out] == [
        Verdict.UNCHANGED, Verdict.NEAR_DUPLICATE, Verdict.UNCHANGED, Verdict.UNIQUE
    ]  # fmt: skip
    assert not out[0].follow_outlinks and out[0].duplicate_of == "http://o.test/doc"
    assert out[2].follow_outlinks and out[2].duplicate_of is None


def test_revisit_in_the_same_batch() -> None:
    e = engine()
    out = e.process([
        page("http://r.test/a", text(21), 2.0),    # the revisit first in the batch
        page("http://r.test/a", text(21), 1.0),
        page("http://r.test/b", text(22), 1.0),
        page("http://r.test/b", text(23), 2.0),
    ])  # fmt: skip
    assert [d.verdict for d in out] == [
        Verdict.UNCHANGED, Verdict.UNIQUE, Verdict.UNIQUE, Verdict.CHANGED
    ]  # fmt: skip


def test_later_page_first_gets_a_correction() -> None:
    e = engine()
    later = e.process([page("http://m.test/p", near_copy(5), 50.0)])
    assert later[0].verdict is Verdict.UNIQUE
    out = e.process([page("http://o.test/p", text(5), 40.0)])
    assert out[0].verdict is Verdict.UNIQUE
    assert len(out) == 2 and out[1].corrects and out[1].url == "http://m.test/p"
    assert out[1].verdict is Verdict.NEAR_DUPLICATE and out[1].duplicate_of == "http://o.test/p"
    assert not out[1].follow_outlinks


def _flip_only_pair() -> tuple[str, str]:
    """A text and a two-word edit of it whose fingerprints are 2 bits apart, one bit in each
    key of ``build_design(1, (2,))`` (two tables of 32-bit keys): neither table's key agrees,
    and each page's probe finds the other only with its own weakest key bit flipped."""
    words = text(0).split()
    words[147], words[291] = "edit0", "edit0b"
    return text(0), " ".join(words)


def flipping_engine(flips: int = 1) -> DedupEngine:
    index = InMemoryIndex(build_design(1, (2,)), radius=4, flips=flips)
    return DedupEngine(index, MemoryDocStore(), EngineSettings(k=4))


def test_a_pair_found_through_flips_alone_is_never_a_correction() -> None:
    """In page order the later page's flipped probe finds the earlier one; the other way
    round the earlier page's probe finds the later one too, but does not correct it: such a
    pair matches from one side at a time, so a correction would make the answer depend on
    which page came first. The later page is then fetched as unique: nothing lost."""
    base, edited = _flip_only_pair()
    early, late = page("http://a.test/1", base, 1.0), page("http://b.test/1", edited, 2.0)
    e = flipping_engine()
    fps = [Fingerprinter(e.settings.features).fingerprint(p.text) for p in (early, late)]
    assert hamming(*fps) == 2 and not e.index.mutual(fps[0] ^ fps[1])
    in_order = final_verdicts(e.process([early]) + e.process([late]))
    assert in_order[(late.url, late.fetched_at)].verdict is Verdict.NEAR_DUPLICATE
    assert in_order[(late.url, late.fetched_at)].duplicate_of == early.url
    e = flipping_engine()
    reverse = e.process([late]) + e.process([early])
    assert reverse[-1].evidence["later_matches"] == 1  # the earlier page saw the later one
    state = final_verdicts(reverse)
    assert {d.verdict for d in state.values()} == {Verdict.UNIQUE}
    assert not any(d.corrects for d in reverse)
    e = flipping_engine(flips=0)  # without the flips neither page finds the other
    plain = final_verdicts(e.process([early]) + e.process([late]))
    assert {d.verdict for d in plain.values()} == {Verdict.UNIQUE}


def test_batch_order_does_not_matter() -> None:
    e = engine()
    out = e.process(
        [page("http://m.test/p", near_copy(6), 50.0), page("http://o.test/p", text(6), 40.0)]
    )
    assert [d.verdict for d in out] == [Verdict.NEAR_DUPLICATE, Verdict.UNIQUE]
    assert len(out) == 2  # the later page saw the earlier one; nothing to correct


def test_replay_yields_the_same_decision_and_no_new_entry() -> None:
    e = engine()
    batch = [page("http://a.test/1", text(7), 1.0), page("http://b.test/1", near_copy(7), 2.0)]
    first = e.process(batch)
    size = len(e.index)  # type: ignore[arg-type]
    second = e.process(batch)
    assert [(d.url, d.verdict, d.duplicate_of) for d in second] == [
        (d.url, d.verdict, d.duplicate_of) for d in first
    ]
    assert len(e.index) == size  # type: ignore[arg-type]


def test_a_redone_batch_publishes_its_correction_again() -> None:
    """A batch's Redis writes outlive an aborted transaction (crash, rebalance): when the batch
    that corrected a page is redone, the correcting decision must come out again, or the
    page's last published verdict stays the wrong one."""
    e = engine()
    later = page("http://b.test/1", near_copy(7), 2.0)
    earlier = page("http://a.test/1", text(7), 1.0)
    assert [d.verdict for d in e.process([later])] == [Verdict.UNIQUE]
    aborted = e.process([earlier])  # its decisions never reach readers
    assert [(d.url, d.corrects) for d in aborted] == [(earlier.url, False), (later.url, True)]
    redone = e.process([earlier])
    assert [(d.url, d.verdict, d.corrects) for d in redone] == [
        (earlier.url, Verdict.UNIQUE, False),
        (later.url, Verdict.NEAR_DUPLICATE, True),
    ]


def test_a_correction_aborted_then_moved_to_an_earlier_original_is_published() -> None:
    """A fenced worker's batch corrects a page in the store, then its decisions are aborted;
    another worker's batch then finds an earlier original for that page. The page's
    suppression must come out there (the store already held it suppressed, so it once
    did not), or readers keep its first, unique verdict."""
    fingerprint = Fingerprinter(EngineSettings().features).fingerprint
    base, middle_text = text(8), near_copy(8)
    latest_text = next(
        candidate
        for word in WORDS
        if (candidate := f"{middle_text} {word}")
        and hamming(fingerprint(candidate), fingerprint(base)) <= 2
        and hamming(fingerprint(candidate), fingerprint(middle_text)) <= 2
    )
    e = engine()
    earliest = page("http://a.test/1", base, 1.0)
    middle = page("http://b.test/1", middle_text, 2.0)
    latest = page("http://c.test/1", latest_text, 3.0)
    assert [d.verdict for d in e.process([latest])] == [Verdict.UNIQUE]
    aborted = e.process([middle])  # corrects the latest page; its decisions never reach readers
    assert [(d.url, d.corrects, d.duplicate_of) for d in aborted] == [
        (middle.url, False, None), (latest.url, True, middle.url),
    ]  # fmt: skip
    out = e.process([earliest])
    corrections = {d.url: d.duplicate_of for d in out if d.corrects}
    assert corrections == {middle.url: earliest.url, latest.url: earliest.url}
    assert final_verdicts(out)[(latest.url, 3.0)].verdict is Verdict.NEAR_DUPLICATE


def test_sketch_rejects_a_simhash_collision_of_different_texts() -> None:
    # Single-word candidates (the most collision-prone features) show what the sketch is for.
    words_only = FeatureConfig(shingle=1, title_weight=0)
    e = DedupEngine(InMemoryIndex(build_design(3, (4,))), MemoryDocStore(),
                    EngineSettings(features=words_only))  # fmt: skip
    shared = text(11, n=120)
    # Same vocabulary, shuffled order: single-word simhash is identical, 4-shingles are not.
    words = shared.split()
    random.Random(3).shuffle(words)
    out = e.process(
        [page("http://a.test/t", shared, 1.0), page("http://b.test/t", " ".join(words), 2.0)]
    )
    assert out[1].verdict is Verdict.UNIQUE
    assert out[1].evidence["rejected_by_sketch"] == 1 and out[1].evidence["earlier_matches"] == 0
    plain = DedupEngine(InMemoryIndex(build_design(3, (4,))), MemoryDocStore(),
                        EngineSettings(features=words_only, sketch=None))  # fmt: skip
    out = plain.process(
        [page("http://a.test/t", shared, 1.0), page("http://b.test/t", " ".join(words), 2.0)]
    )
    assert out[1].verdict is Verdict.NEAR_DUPLICATE  # the fingerprint alone is fooled


def test_page_ids_are_ordered_by_fetch_time() -> None:
    assert page_id("http://z.test/", 1.0) < page_id("http://a.test/", 1.001)
    assert page_id("http://a.test/", 5.0) == page_id("http://a.test/", 5.0)


def families(rng: random.Random, seed: int, count: int, edits: list[int]) -> list[Page]:
    """``count`` families of 1-4 pages, each an edit of one text by a number of ``edits``."""
    pages = []
    for family in range(count):
        for member in range(rng.randint(1, 4)):
            body = text(1000 * seed + family, edits=rng.choice(edits))
            at = rng.uniform(0, 100)
            pages.append(page(f"http://h{family}.test/{member}-{seed}", body, at))
    return pages


def shuffled_run(
    e: DedupEngine, pages: list[Page], rng: random.Random, batch: int
) -> list[Decision]:
    """Every decision of the pages processed in a shuffled order, ``batch`` at a time."""
    arrival = pages.copy()
    rng.shuffle(arrival)
    decisions: list[Decision] = []
    for start in range(0, len(arrival), batch):
        decisions += e.process(arrival[start : start + batch])
    return decisions


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), batch=st.integers(1, 7))
def test_any_arrival_order_ends_in_the_earliest_wins_answer(seed: int, batch: int) -> None:
    rng = random.Random(seed)
    pages = families(rng, seed, 6, [0, 0, 1, 2, 30])
    e = engine()
    decisions = shuffled_run(e, pages, rng, batch)
    state = final_verdicts(decisions)
    fingerprints = Fingerprinter(e.settings.features)
    fp = {p.url: fingerprints.fingerprint(p.text, p.title) for p in pages}
    sketches = Sketcher(e.settings.sketch, e.settings.features).sketch_many(
        [Document(p.text, p.title) for p in pages]
    )
    sk = {p.url: s for p, s in zip(pages, sketches, strict=True)}

    def duplicate(a: Page, b: Page) -> bool:  # the oracle: within k, then same text or J ~>= 0.9
        within = hamming(fp[a.url], fp[b.url]) <= 3
        return within and (a.text == b.text or verify(sk[a.url], sk[b.url])[0])

    ordered = sorted(pages, key=lambda p: page_id(p.url, p.fetched_at))
    for index, p in enumerate(ordered):
        earlier = [q for q in ordered[:index] if duplicate(q, p)]
        got = state[(p.url, p.fetched_at)]
        suppressed = got.verdict in (Verdict.NEAR_DUPLICATE, Verdict.EXACT_DUPLICATE)
        assert suppressed == bool(earlier), (p.url, got.verdict, [q.url for q in earlier])
        if suppressed:
            assert got.duplicate_of in {q.url for q in earlier}
    assert all(0.0 <= d.priority <= 1.0 for d in decisions)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), batch=st.integers(1, 7))
def test_with_flips_any_arrival_order_ends_between_the_two_answers(seed: int, batch: int) -> None:
    """With flipped probes a page is suppressed whenever an earlier near-duplicate matches it
    from either side (the earliest-wins answer, as without flips), and otherwise only when its
    own flipped probe reaches one: never a page that no earlier near-duplicate reaches."""
    rng = random.Random(seed)
    pages = families(rng, seed, 5, [0, 1, 2, 3, 30])
    e = flipping_engine()
    state = final_verdicts(shuffled_run(e, pages, rng, batch))
    documents = [Document(p.text, p.title) for p in pages]
    fps, rows, margins = Sketcher(
        e.settings.sketch, e.settings.features
    ).fingerprint_sketch_margins(documents)
    at = {p.url: i for i, p in enumerate(pages)}
    design = build_design(1, (2,))

    def alike(a: Page, b: Page) -> bool:
        return a.text == b.text or verify(rows[at[a.url]].tobytes(), rows[at[b.url]].tobytes())[0]

    def reached(later: Page, earlier: Page) -> bool:  # the later page's flipped probe
        diff = np.array([fps[at[later.url]] ^ fps[at[earlier.url]]], dtype=np.uint64)
        slack = design.slack(margins[at[later.url]][None, :], 1)
        masks = rule_masks(design.key_masks, slack, 1)
        return int(np.bitwise_count(diff)[0]) <= 4 and bool(agrees_on_a_key(diff, masks)[0])

    ordered = sorted(pages, key=lambda p: page_id(p.url, p.fetched_at))
    for index, p in enumerate(ordered):
        earlier = [q for q in ordered[:index] if alike(q, p)]
        must = [q for q in earlier if e.index.mutual(int(fps[at[p.url]] ^ fps[at[q.url]]))]
        may = must + [q for q in earlier if reached(p, q)]
        got = state[(p.url, p.fetched_at)]
        suppressed = got.verdict in (Verdict.NEAR_DUPLICATE, Verdict.EXACT_DUPLICATE)
        assert suppressed or not must, (p.url, [q.url for q in must])
        assert not suppressed or may, (p.url, got)
        # A correction names the earliest page it knows within k, not always a candidate.
        within = {q.url for q in earlier if hamming(int(fps[at[p.url]]), int(fps[at[q.url]])) <= 4}
        assert not suppressed or got.duplicate_of in within, (p.url, got)


@pytest.mark.parametrize("depth", [0, 4, 12])
def test_priority_falls_with_depth(depth: int) -> None:
    e = engine()
    shallow = e.process([page("http://x.test/a", text(9), 1.0, depth=0)])[0].priority
    deep = e.process([page("http://x.test/b", text(10), 1.0, depth=depth)])[0].priority
    assert deep <= shallow and 0 < deep <= 1
