"""Helpers for the worker tests: configs with their own topics and namespace, page streams,
decision readers, and workers run in a thread or as ``dedup-worker`` subprocesses.

Everything talks to the session's real Tansu broker and redis-server(s); nothing is mocked.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from dedup_worker.adapters import kafka
from dedup_worker.adapters.kafka import KafkaSettings, Record, produce_all
from dedup_worker.contract.messages import Decision, Page, Verdict, decode_decision
from dedup_worker.contract.reading import fold_decisions
from dedup_worker.core.engine import EngineSettings
from dedup_worker.core.index_api import mutual_match, rule_masks
from dedup_worker.core.planner import plan
from dedup_worker.core.records import page_id
from dedup_worker.core.simhash import Document
from dedup_worker.core.sketch import DEFAULT_SKETCH, Sketcher, verify
from dedup_worker.core.text import content_checksum
from dedup_worker.worker.config import WorkerConfig, load_config
from dedup_worker.worker.main import build_worker, engine_settings
from dedup_worker.worker.service import Worker

WORDS = [f"w{i}" for i in range(5000)]
BIG = 80 * 1024 * 1024


# ---- pages ---------------------------------------------------------------------------------------


def text(seed: int, n: int = 300) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def edited(base: str, seed: int, edits: int = 1) -> str:
    words = base.split()
    rng = random.Random(seed)
    for e in range(edits):
        words[rng.randrange(len(words))] = f"edit{seed}x{e}"
    return " ".join(words)


def page(url: str, body: str, at: float, title: str = "") -> Page:
    host = url.split("/")[2]
    return Page(url=url, host=host, fetched_at=at, text=body, title=title, depth=1,
                outlinks=(f"https://{host}/next",))  # fmt: skip


def fingerprints(pages: list[Page], settings: EngineSettings | None = None) -> list[Signature]:
    """Each page's fingerprint and sketch, computed as the engine computes them."""
    settings = settings or engine_settings(load_config([], {}))
    sketcher = Sketcher(settings.sketch or DEFAULT_SKETCH, settings.features)
    documents = [Document(p.text, p.title) for p in pages]
    fps, rows, margins = sketcher.fingerprint_sketch_margins(documents)
    return [
        Signature(int(fp), row.tobytes(), margin)
        for fp, row, margin in zip(fps, rows, margins, strict=True)
    ]


@dataclass(frozen=True)
class Signature:
    fingerprint: int
    sketch: bytes
    margins: Any = None  # the page's 64 bit margins (the key bits its probe flips)


def fingerprint(p: Page) -> int:
    return fingerprints([p])[0].fingerprint


def near_variant(base: str, k: int, seed: int) -> str:
    """An edit of ``base`` whose fingerprint is 1..k bits away (searching over seeds)."""
    fp = fingerprint(page("https://x/", base, 0))
    for attempt in range(seed, seed + 500):
        candidate = edited(base, attempt)
        distance = (fingerprint(page("https://x/", candidate, 0)) ^ fp).bit_count()
        if 1 <= distance <= k:
            return candidate
    raise AssertionError("no near variant found")


# ---- Kafka I/O -----------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, messages: Iterable[tuple[bytes | None, bytes]]) -> int:
    return produce_all(KafkaSettings(bootstrap), topic, messages, max_message_bytes=BIG)


def produce_pages(bootstrap: str, topic: str, pages: Iterable[Page]) -> int:
    return produce(bootstrap, topic, ((p.host.encode(), p.to_json()) for p in pages))


class TopicReader:
    """Reads a whole topic (every partition, read_committed unless told) and keeps what it
    read."""

    def __init__(self, bootstrap: str, topic: str, isolation: str = "read_committed") -> None:
        self.reader = kafka.TopicReader(
            KafkaSettings(bootstrap), topic, isolation=isolation, max_message_bytes=BIG
        )
        self.reader.start("beginning")
        self.records: list[Record] = []

    def read_until(self, done: Callable[[list[Record]], bool], timeout: float = 30) -> list[Record]:
        deadline = time.monotonic() + timeout
        while not done(self.records):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out with {len(self.records)} records read")
            self.records.extend(self.reader.poll(0.2))
        return self.records

    def settle(self, quiet: float = 1.5) -> list[Record]:
        """Read until nothing new arrives for ``quiet`` seconds."""
        last = time.monotonic()
        while time.monotonic() - last < quiet:
            batch = self.reader.poll(0.2)
            if batch:
                self.records.extend(batch)
                last = time.monotonic()
        return self.records

    def close(self) -> None:
        self.reader.close()


class DecisionReader(TopicReader):
    @property
    def decisions(self) -> list[Decision]:
        return [decode_decision(r.value or b"") for r in self.records]

    def pages_decided(self) -> set[tuple[str, float]]:
        return {(d.url, d.fetched_at) for d in self.decisions if not d.corrects}

    def wait_for_pages(self, pages: Iterable[Page], timeout: float = 60) -> list[Decision]:
        wanted = {(p.url, p.fetched_at) for p in pages}

        def done(_: list[Record]) -> bool:
            return wanted <= self.pages_decided()

        self.read_until(done, timeout)
        return self.decisions


# ---- workers -------------------------------------------------------------------------------------


@dataclass
class Setup:
    """One test's topics, group and namespace, as environment variables and as a config."""

    env: dict[str, str]
    bootstrap: str
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def config(self) -> WorkerConfig:
        return load_config([], self.env)

    @property
    def pages(self) -> str:
        return self.env["NEARDUP_PAGES_TOPIC"]

    @property
    def decisions(self) -> str:
        return self.env["NEARDUP_DECISIONS_TOPIC"]

    @property
    def dlq(self) -> str:
        return f"{self.pages}.dlq"

    def reader(self, topic: str | None = None) -> DecisionReader:
        return DecisionReader(self.bootstrap, topic or self.decisions)


@contextmanager
def worker_thread(config: WorkerConfig) -> Iterator[Worker]:
    """A worker running in a thread of the test process; stopped (gracefully) on exit."""
    worker = build_worker(config)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive(), "worker did not stop"
    assert not errors, errors


class WorkerProcess:
    """``dedup-worker`` as a subprocess (its log goes to a file, shown on failure)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._log_file = log.open("ab")
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "dedup-worker")],
            env={**os.environ, **env, "NEARDUP_LOG_LEVEL": "INFO"},
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log_file.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log_file.close()

    def log_text(self) -> str:
        return self.full_log()[-5000:]

    def full_log(self) -> str:
        return self.log.read_text(errors="replace")


# ---- planted near-duplicate families and the earliest-wins oracle --------------------------------


def family_stream(seed: int, families: int, members: int, singles: int) -> list[Page]:
    """Families of 1-word edits of one text, spread over hosts and fetch times; shuffled, so
    later pages often arrive (and get decided) before earlier ones."""
    rng = random.Random(seed)
    pages: list[Page] = []
    for f in range(families):
        base = text(seed * 100_000 + f)
        for m in range(members):
            body = base if m == 0 else edited(base, seed * 100_000 + f * 100 + m)
            host = f"h{rng.randrange(24)}.example"
            pages.append(page(f"https://{host}/f{f}/m{m}", body, rng.uniform(1000, 1100)))
    for i in range(singles):
        host = f"h{rng.randrange(24)}.example"
        pages.append(page(f"https://{host}/s{i}", text(seed * 100_000 + 50_000 + i), 1000 + i / 7))
    rng.shuffle(pages)
    return pages


@dataclass(frozen=True)
class Expected:
    suppressed: bool
    fingerprint: int
    order: int
    #: Whether it may also be suppressed: an earlier page matches it only through the flipped
    #: key bits of its own probe, found if it probed after that page was stored (always so in
    #: page order), not if the two raced.
    may_be_suppressed: bool = False


@cache
def _default_config() -> WorkerConfig:
    return load_config([], {})


@cache
def _design() -> Any:
    """The default configuration's table design (planned once: ~0.1 s a plan)."""
    config = _default_config()
    return plan(config.expected_pages, config.tables_k, replicas=config.table_replicas).design()


def candidate_rule() -> Callable[[int, int], bool]:
    """The index's matching rule under the default configuration, either side probing: within
    k, and (beyond the tables' k) agreeing on one table's key bits (``HammingIndex.mutual``)."""
    config = _default_config()
    design = _design()
    return lambda a, b: mutual_match(design, config.k, a ^ b)


def flip_rule(later: Signature) -> Callable[[int], bool]:
    """The rule when ``later`` probes with its flips: an earlier fingerprint within k that
    agrees with it on a table's key but for the later page's weakest key bit there."""
    config = _default_config()
    design = _design()
    slack = design.slack(np.asarray(later.margins, dtype=np.int32)[None, :], config.probe_flips)
    masks = [int(m) for m in rule_masks(design.key_masks, slack, 1)[0]]

    def near(earlier: int) -> bool:
        diff = later.fingerprint ^ earlier
        if diff.bit_count() > config.k:
            return False
        return diff.bit_count() <= design.k or any(diff & m == 0 for m in masks)

    return near


def oracle(pages: list[Page]) -> dict[tuple[str, float], Expected]:
    """A page is a near-duplicate iff an EARLIER page (fetched_at, then page id) of another URL
    is a candidate from either side (``candidate_rule``) and the pair passes the engine's check
    (same checksum or verified sketches); it may be one when such a page is a candidate of its
    own flipped probe only (``flip_rule``). Brute force over what the engine computes."""
    settings = engine_settings(load_config([], {}))
    near = candidate_rule()
    ordered = sorted(pages, key=lambda p: page_id(p.url, p.fetched_at))
    signatures = fingerprints(ordered, settings)
    expected = {}
    for i, (p, sig) in enumerate(zip(ordered, signatures, strict=True)):
        alike = [
            other
            for j, other in enumerate(signatures[:i])
            if ordered[j].url != p.url and _same_content(p, ordered[j], sig, other, settings)
        ]
        suppressed = any(near(sig.fingerprint, other.fingerprint) for other in alike)
        flipped = flip_rule(sig)
        expected[(p.url, p.fetched_at)] = Expected(
            suppressed,
            sig.fingerprint,
            page_id(p.url, p.fetched_at),
            suppressed or any(flipped(other.fingerprint) for other in alike),
        )
    return expected


def _same_content(a: Page, b: Page, sa: Signature, sb: Signature, settings: EngineSettings) -> bool:
    if content_checksum(a.text) == content_checksum(b.text) or settings.sketch is None:
        return True
    return verify(sa.sketch, sb.sketch, settings.sketch)[0]


def check_against_oracle(decisions: list[Decision], pages: list[Page]) -> int:
    """Final verdicts equal the oracle's (a page it says may be suppressed either way);
    duplicate_of is an earlier candidate. Returns the number of suppressed pages (so callers
    can check the stream planted some)."""
    expected = oracle(pages)
    near, k = candidate_rule(), load_config([], {}).k
    final = fold_decisions(decisions)
    assert set(final) == set(expected), "a page has no decision"
    by_url = {url: e for (url, _), e in expected.items()}
    wrong = []
    for key, decision in final.items():
        want = expected[key]
        suppressed = decision.verdict in (Verdict.NEAR_DUPLICATE, Verdict.EXACT_DUPLICATE)
        if suppressed != want.suppressed and not (suppressed and want.may_be_suppressed):
            wrong.append((key, decision.verdict, decision.corrects))
        if suppressed:
            original = by_url[decision.duplicate_of or ""]
            assert original.order < want.order, (key, decision.duplicate_of)
            # Within k of the page: a correction names the earliest page it knows within k of
            # the corrected one (the engine's ``_earliest_original``), which need not share a
            # table key with it (seen once in a race of three workers on a busy machine).
            distance = (original.fingerprint ^ want.fingerprint).bit_count()
            assert distance <= k, (key, decision.duplicate_of, distance)
    assert not wrong, f"{len(wrong)} verdicts differ from the oracle, e.g. {wrong[:5]}" + (
        _explain(wrong[0][0], decisions, pages, near)
    )
    return sum(e.suppressed for e in expected.values())


def _explain(
    key: tuple[str, float],
    decisions: list[Decision],
    pages: list[Page],
    near: Callable[[int, int], bool],
) -> str:
    """The wrong page's decisions and those of its candidate pages (failure message)."""
    settings = engine_settings(load_config([], {}))
    by_key = {(p.url, p.fetched_at): p for p in pages}
    mine = fingerprints([by_key[key]], settings)[0]
    lines = [f"\ndecisions of {key} (id {page_id(*key)}):"]
    lines += [f"  {d.verdict.value} corrects={d.corrects} of={d.duplicate_of} {d.evidence}"
              for d in decisions if (d.url, d.fetched_at) == key]  # fmt: skip
    for page, sig in zip(pages, fingerprints(pages, settings), strict=True):
        other = (page.url, page.fetched_at)
        if other != key and near(sig.fingerprint, mine.fingerprint):
            lines.append(f"near page {other} (id {page_id(*other)}):")
            lines += [f"  {d.verdict.value} corrects={d.corrects} of={d.duplicate_of}"
                      for d in decisions if (d.url, d.fetched_at) == other]  # fmt: skip
    return "\n".join(lines)
