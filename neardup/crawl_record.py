"""The decisions of a ``neardup crawl`` run: copied to ``--out`` as they come
(:class:`Recorder`), tallied for the progress line and the summary (:class:`Tally`), and the
verdict table that ends the run's output (:func:`summary_lines`). Kept apart from the run
(:mod:`neardup.crawl_run`), which starts the recorder before the crawl and drains it after the
workers stop; what the run prints beyond the decisions is in :mod:`neardup.crawl_outcome`.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import IO

from dedup_worker.adapters.kafka import KafkaSettings, ReaderThread, Record, TopicReader
from neardup.summary import CrawlSummary, suppressed_links

logger = logging.getLogger(__name__)


class Tally:
    """What the recorder has read, folded by the contract's rule (the same fold as
    ``neardup report``, so the summary printed at the end agrees with the report)."""

    def __init__(self) -> None:
        self.summary = CrawlSummary()
        self.lock = threading.Lock()

    def add(self, raw: bytes) -> None:
        with self.lock:
            self.summary.add(raw)

    def counts(self) -> Counter[str]:
        with self.lock:
            return self.summary.verdicts

    def suppressed_links(self) -> int:
        with self.lock:
            return suppressed_links(self.summary)


class Recorder:
    """Copies every decision of this run to the output file, and tallies them."""

    def __init__(self, kafka: KafkaSettings, topic: str, out: IO[bytes], tally: Tally) -> None:
        self.reader = TopicReader(kafka, topic)
        # Positioned now, before the crawl starts: the crawl's decisions come after this.
        self.reader.start("end")
        self.out, self.tally = out, tally
        self.thread = ReaderThread(self.reader, self._record, name="decisions-recorder")

    def start(self) -> None:
        self.thread.start()

    def _record(self, records: list[Record]) -> None:
        for record in records:
            value = record.value or b""
            self.out.write(value + b"\n")
            self.tally.add(value)
        self.out.flush()

    def drain(self, timeout: float = 15.0) -> None:
        """Wait until everything on the topic now has been recorded, then stop."""
        if not self.thread.drain(timeout):
            logger.warning("decisions still arriving after %.0f s; stopping the recorder", timeout)
        self.thread.stop()


def summary_lines(summary: CrawlSummary) -> list[str]:
    """The verdict table and the outlink and correction counts that end a crawl's output."""
    counts = summary.verdicts
    lines = [f"{'verdict':<18}{'pages':>8}"]
    for verdict in ("unique", "near_duplicate", "exact_duplicate", "changed", "unchanged"):
        lines.append(f"{verdict:<18}{counts.get(verdict, 0):>8}")
    lines.append(f"{'total':<18}{sum(counts.values()):>8}")
    suppressed = suppressed_links(summary)
    lines.append(f"outlinks suppressed: {suppressed}; corrections: {summary.corrections}")
    return lines
