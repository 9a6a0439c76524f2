"""The worker loop: pages in, decisions out, offsets committed only after the decisions are safe.

The commit order (the one and only):

1. poll a batch: up to ``batch_max_records`` of the pages already fetched, waiting at most
   ``batch_max_wait_ms`` for the first one (so the batch size follows the load), and, with
   ``batch_interval_ms``, waiting for more until that long after the previous batch's poll
   (each batch costs a transaction whatever its size: fewer, larger ones at light load);
2. decode each record with ``decode_page``; a ``ContractError`` makes a ``DeadLetter`` (reason,
   detail, original key and value) and processing carries on with the next record; then
   ``engine.prepare`` (fingerprints, checksums: CPU only, nothing stored);
3. ``engine.decide``: the index and page records in Redis are updated here; replaying a batch
   is safe (same decisions, no second index entry), which is what makes 4-5 safe. The
   decisions are encoded here too. If this fails with anything but a ``NeardupError``, the
   batch is redone page by page and the pages that fail become ``processing_failed`` dead
   letters (bad input that passed the contract must not crash-loop the worker);
4. begin a transaction (transactional mode), produce every decision (key = host) to the
   decisions topic and every dead letter (key = the original key) to the DLQ topic;
5. transactional: ``send_offsets_to_transaction`` + ``commit_transaction``, so decisions and
   offsets commit together; otherwise ``flush`` (every record acknowledged), then commit the
   offsets synchronously (at-least-once: a crash between the two replays the batch, and the
   replay yields the same decisions);
6. then the next batch.

One concurrency mechanism, prefetch: when a batch came full (a backlog), steps 1-2 of the next
batch run in a prefetch thread during step 3 of this one, whose Redis waits release the GIL.
The prefetch finishes before step 4, so the consumer is never used by two threads at once, and
a batch commits before the next one is decided. Under lighter load every step runs in order
in this thread, so the next batch takes the pages that arrived meanwhile. (Committing batch N
in a helper thread while N+1 was decided measured within noise of this, and was removed: see
the README, "Measured figures".)

Failures: a commit retries a retriable Kafka failure in place for up to ``commit_retry_ms``
(an abort could undo a commit the broker completes later). ``BackendUnavailable`` (Redis or
Kafka unreachable) anywhere in 3-5 aborts the open transaction, seeks the consumer back to the
first offsets of everything not committed (this batch and a prefetched one) and sleeps an
exponential, capped backoff before polling (the same records) again; the consumer keeps
polling between attempts, so it stays in its group however long the outage lasts.
``OwnershipLost`` (a rebalance refused our commit, or ran during the prefetch) does the same
without the backoff: the partitions' owner processes the records again.

Rebalances: the rebalance callbacks run inside a poll (in whichever thread polls). A poll in
this thread comes after the previous batch committed, so nothing is in flight when partitions
move. A rebalance during a prefetch that revoked a partition of the batch is noticed before
step 4 and the batch is redone rather than committed over a new owner; one that revoked none of
its partitions (a cooperative rebalance adding or dropping a topic generation) does not stop
it. A revoked batch that was being retried is simply redelivered
to the partition's new owner.

Stop (``stop()``, from SIGTERM/SIGINT in main): the current batch finishes and commits, then the
consumer leaves the group and the producer closes. A prefetched batch and a batch waiting out a
backoff are left uncommitted; the group redelivers them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from dedup_worker.adapters.kafka import (
    Offsets,
    OwnershipLost,
    Record,
    first_offsets,
    next_offsets,
    offsets_text,
)
from dedup_worker.contract.messages import DeadLetter
from dedup_worker.errors import BackendUnavailable, ContractError, NeardupError
from dedup_worker.worker.batching import Backoff, Batch, Encoded, Timing, encode_decisions
from dedup_worker.worker.config import WorkerConfig
from dedup_worker.worker.intake import Intake, record_fields
from dedup_worker.worker.metrics import GcPauses, WorkerMetrics
from dedup_worker.worker.ports import Engine, PageSource, Publisher
from dedup_worker.worker.reporting import BatchReporter

logger = logging.getLogger(__name__)

#: How often the consumer-lag gauge is refreshed (it costs a ListOffsets round trip).
LAG_INTERVAL_S = 5.0


class Worker:
    """Runs the consume-decide-produce loop until ``stop()``; see the module doc for the order."""

    def __init__(
        self,
        config: WorkerConfig,
        engine: Engine,
        consumer: PageSource,
        producer: Publisher,
        metrics: WorkerMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.engine = engine
        self.consumer = consumer
        self.producer = producer
        self.metrics = metrics or WorkerMetrics()
        self.clock = clock
        self._stop = threading.Event()
        self._intake = Intake(config, clock)
        self._backoff = Backoff(cap_s=config.backoff_max_ms / 1000)
        self._lag_due = 0.0
        self._gc_pauses = GcPauses(self.metrics)
        self._reporter = BatchReporter(self.metrics, self._gc_pauses)
        # One thread that polls, decodes and prepares the next batch while this one is decided
        # (its Redis waits release the GIL). Only used when batches come full, i.e. a backlog:
        # at lower load a batch should take the pages that arrive while the previous one runs.
        self._prefetcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
        self._next: Future[Batch] | None = None
        self._last_batch_at = 0.0  # time.monotonic() of the last poll that found pages

    def stop(self) -> None:
        """Ask the loop to finish its current batch and exit (safe from a signal handler)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        """The loop; returns after ``stop()`` with everything done committed and closed."""
        mode = "transactional" if self.producer.transactional else "at-least-once"
        logger.info("worker running (%s): %s", mode, self.config.describe())
        try:
            with self._gc_pauses:
                while not self._stop.is_set():
                    self.step()
        finally:
            self._close()

    def step(self) -> None:
        """Take one batch (prefetched or polled now) and see it through, or rewind it."""
        batch = self._take()
        self._refresh_lag()
        try:
            if batch.records:
                self._handle(batch)
        except BackendUnavailable as exc:
            self._retry_later(batch, exc)
        except OwnershipLost as exc:
            self._drop(batch)
            logger.warning("batch dropped, its partitions moved: %s", exc)
        else:
            self._backoff.reset()

    # ---- one batch -------------------------------------------------------------------------

    def _take(self) -> Batch:
        if self._next is None:
            return self._fetch()
        future, self._next = self._next, None
        return future.result()

    def _fetch(self) -> Batch:
        """Poll, decode and prepare one batch (in the prefetch thread, or inline)."""
        polled = time.monotonic()
        linger_ms = max(
            0, round((self._last_batch_at - polled) * 1000) + self.config.batch_interval_ms
        )
        records = self.consumer.poll_batch(
            self.config.batch_max_records, self.config.batch_max_wait_ms, linger_ms
        )
        if records:
            self._last_batch_at = polled
        started = time.perf_counter()
        batch = self._intake.decode(records)
        if batch.pages:
            # How long the oldest page took from its fetch to this poll: crawler, broker and
            # queueing, before the worker's own part (which batch_seconds measures).
            oldest = min(page.fetched_at for page in batch.pages)
            self.metrics.page_age_seconds.observe(max(0.0, self.clock() - oldest))
        batch.rebalances = self.consumer.rebalances
        if batch.pages:
            try:
                batch.prepared = self.engine.prepare(batch.pages)
            except Exception:  # bad input the contract let through; _decide isolates it
                logger.exception("preparing a batch of %d pages failed", len(batch.pages))
        batch.decode_seconds = time.perf_counter() - started
        return batch

    def _prefetch(self, batch: Batch) -> None:
        if len(batch.records) >= self.config.batch_max_records and not self._stop.is_set():
            self._next = self._prefetcher.submit(self._fetch)
            self.metrics.prefetched_batches.inc()

    def _consumer_idle(self) -> None:
        """Wait for the prefetch to finish: from here this thread alone uses the consumer."""
        if self._next is not None:
            wait([self._next])

    def _handle(self, batch: Batch) -> None:
        self._prefetch(batch)
        started = time.perf_counter()
        decisions = self._decide(batch)
        decided = time.perf_counter()
        self._consumer_idle()
        if self.consumer.revoked_since(batch.rebalances, first_offsets(batch.records)):
            # The prefetch's poll ran a rebalance that took a partition of this batch: it may
            # have a new owner that starts from the last commit. Redo the batch rather than
            # race it. (A rebalance that only added partitions, or took others, as a
            # cooperative one does when a topic generation comes or goes, leaves it alone.)
            raise OwnershipLost("the group revoked a partition of the batch while it was decided")
        offsets = self._publish(batch, decisions)
        timing = Timing(batch.decode_seconds, decided - started, time.perf_counter() - decided)
        self._reporter.committed(batch, decisions, timing, offsets)

    def _drop(self, batch: Batch) -> list[Record]:
        """Abort what is open and seek back to everything not committed (returned)."""
        self.producer.abort()
        return self._rewind(batch)

    def _rewind(self, batch: Batch) -> list[Record]:
        """Seek back to the batch's first records, and to those of a prefetched batch (dropped)."""
        records = list(batch.records)
        if self._next is not None:
            future, self._next = self._next, None
            try:
                records += future.result().records
            except NeardupError as exc:
                logger.warning("prefetched batch dropped: %s", exc)
        self.consumer.rewind(records)
        return records

    def _decide(self, batch: Batch) -> list[Encoded]:
        """The batch's decisions, encoded. A page that makes the engine (or the encoding) fail
        with anything but a NeardupError is bad input the contract let through: the batch is
        redone page by page and such pages become ``processing_failed`` dead letters, so one
        page can never stop the worker (or crash-loop it on restart)."""
        try:
            if batch.prepared is not None:
                return encode_decisions(self.engine.decide(batch.prepared))
        except NeardupError:
            raise
        except Exception:
            logger.exception("batch of %d pages failed; isolating the bad pages", len(batch.pages))
        encoded: list[Encoded] = []
        for page, record in zip(list(batch.pages), list(batch.page_records), strict=True):
            try:
                encoded += encode_decisions(self.engine.process([page]))
            except NeardupError:
                raise
            except Exception as exc:
                error = ContractError("processing_failed", f"{type(exc).__name__}: {exc}")
                batch.dead.append(self._intake.dead_letter(record, error))
                batch.pages.remove(page)
        return encoded

    def _produce(self, batch: Batch, decisions: list[Encoded]) -> None:
        """Begin a transaction (transactional mode) and queue the decisions and dead letters."""
        self.producer.begin()
        try:
            topic = self.config.decisions_topic
            for d in decisions:
                self.producer.send(topic, d.key, d.value)
            for dead in batch.dead:
                self._send_dead_letter(dead)
        except BaseException:
            self.producer.abort()
            raise

    def _publish(self, batch: Batch, decisions: list[Encoded]) -> Offsets:
        """Produce, then commit the decisions with the batch's offsets: in the transaction, or
        (at-least-once) once every record is acknowledged."""
        offsets = next_offsets(batch.records)
        self._produce(batch, decisions)
        try:
            if self.producer.transactional:
                self.producer.commit(offsets, self.consumer.group_metadata())
            else:
                self.producer.flush()
                self.consumer.commit(offsets)
        except BaseException:
            self.producer.abort()
            raise
        logger.debug("committed %s", offsets_text(offsets))
        return offsets

    def _send_dead_letter(self, dead: DeadLetter) -> None:
        self.producer.send(self.config.dlq_topic, dead.key, dead.to_json())

    # ---- failures and housekeeping -----------------------------------------------------------

    def _retry_later(self, batch: Batch, exc: BackendUnavailable) -> None:
        """Nothing of the batch is committed: rewind to it and wait before polling again."""
        records = self._drop(batch)
        delay = self._backoff.next_delay()
        self.metrics.retries.inc()
        where = record_fields(records[0], retry_in_s=delay) if records else {"retry_in_s": delay}
        logger.warning(
            "backend unavailable at %s, retrying %d records in %.1f s (attempt %d): %s",
            offsets_text(first_offsets(records)) or "-",
            len(records),
            delay,
            self._backoff.failures,
            exc,
            extra=where,
        )
        self._stop.wait(delay)

    def _refresh_lag(self) -> None:
        now = time.monotonic()
        if now < self._lag_due:
            return
        self._lag_due = now + LAG_INTERVAL_S
        try:
            self.metrics.observe_lag(self.consumer.lag())
        except BackendUnavailable as exc:
            logger.debug("consumer lag not refreshed: %s", exc)

    def _close(self) -> None:
        """Leave the group first (partitions move at once), then flush and close the producer.
        A prefetched batch is left uncommitted: the group redelivers it."""
        self._consumer_idle()
        self._prefetcher.shutdown()
        self.producer.abort()  # only a failed commit leaves one open
        try:
            self.consumer.close()
        finally:
            self.producer.close()
        logger.info("worker stopped")
