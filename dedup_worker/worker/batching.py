"""The worker's per-batch bookkeeping: the batch on its way, its timing, encoded decisions,
the progress window and the retry backoff (plain data; the loop is in :mod:`service`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from dedup_worker.adapters.kafka import Offsets, Record
from dedup_worker.contract.messages import DeadLetter, Decision, Page
from dedup_worker.core.engine import Prepared

logger = logging.getLogger(__name__)

BACKOFF_INITIAL_S = 0.1


@dataclass
class Backoff:
    """Exponential backoff, capped; ``reset`` after a success."""

    cap_s: float
    initial_s: float = BACKOFF_INITIAL_S
    failures: int = field(default=0, init=False)

    def next_delay(self) -> float:
        self.failures += 1
        return float(min(self.cap_s, self.initial_s * 2 ** (self.failures - 1)))

    def reset(self) -> None:
        self.failures = 0


@dataclass
class Progress:
    """The window the periodic INFO progress line reports on."""

    since: float
    records: int = 0
    offsets: Offsets = field(default_factory=dict)


@dataclass
class Batch:
    records: list[Record]
    pages: list[Page]
    page_records: list[Record]  # the record of each page
    dead: list[DeadLetter]
    rebalances: int = 0  # the consumer's rebalance count right after the poll
    prepared: Prepared | None = None  # None: prepare failed, isolate the bad pages
    decode_seconds: float = 0.0


@dataclass(frozen=True)
class Timing:
    """Seconds spent on each step of one batch."""

    decode: float
    engine: float
    commit: float

    @property
    def total(self) -> float:
        return self.decode + self.engine + self.commit


@dataclass(slots=True)  # a value; not frozen for speed, one per decision (see messages.Page)
class Encoded:
    """A decision and its message, encoded before the transaction begins."""

    decision: Decision
    key: bytes
    value: bytes


def encode_decisions(decisions: list[Decision]) -> list[Encoded]:
    return [Encoded(d, d.host.encode("utf-8"), d.to_json()) for d in decisions]
