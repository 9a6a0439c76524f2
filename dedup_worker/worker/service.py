"""The worker loop: pages in, decisions out, offsets committed only after the decisions are safe.

The commit order (the one and only; every step finishes before the next starts):

1. poll a batch: up to ``batch_max_records`` of the pages already fetched, waiting at most
   ``batch_max_wait_ms`` for the first one (so the batch size follows the load);
2. decode each record with ``decode_page``; a ``ContractError`` makes a ``DeadLetter`` (reason,
   detail, original key and value) and processing carries on with the next record; then
   ``engine.prepare`` (fingerprints, checksums: CPU only, nothing stored);
3. ``engine.decide``: the index and page records in Redis are updated here; replaying a batch
   is safe (same decisions, no second index entry), which is what makes 5-6 safe. The
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

Prefetch: when a batch comes full (a backlog), steps 1-2 of the next batch run in a helper
thread during step 3 of this one, whose Redis waits release the GIL. The prefetch finishes
before step 4, so the consumer is never used by two threads at once, and the next batch is
neither decided nor committed before this one is. A prefetched batch that is not processed
(failure, stop) is never committed: it is rewound or redelivered like the current one.

Failures: ``BackendUnavailable`` (Redis or Kafka unreachable) anywhere in 3-5 aborts the open
transaction, commits nothing, seeks the consumer back to the batch's first offsets (and drops a
prefetched batch) and sleeps an exponential, capped backoff before polling (the same records)
again; the consumer keeps polling between attempts, so it stays in its group however long the
outage lasts. ``OwnershipLost`` (a rebalance refused our commit, or ran during the prefetch)
aborts and drops the batch: its partitions' owner processes it again.

Rebalances: the rebalance callbacks run inside a poll. Without prefetch that is when the
previous batch is already committed, so revocation never has pending work to commit. A
rebalance during a prefetch is noticed before step 4 and the batch is redone rather than
committed over a new owner. A revoked batch that was being retried is simply redelivered to
the partition's new owner.

Stop (``stop()``, from SIGTERM/SIGINT in main): the current batch finishes and commits, then the
consumer leaves the group and the producer closes. A stop during a backoff leaves that batch
uncommitted; it is redelivered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Protocol

from dedup_worker.contract.messages import DeadLetter, Decision, Page, decode_page
from dedup_worker.core.engine import Prepared
from dedup_worker.errors import BackendUnavailable, ContractError, NeardupError
from dedup_worker.worker.batching import (
    Backoff,
    Batch,
    Encoded,
    Progress,
    Timing,
    encode_decisions,
)
from dedup_worker.worker.config import WorkerConfig
from dedup_worker.worker.kafka_io import (
    DecisionProducer,
    Offsets,
    OwnershipLost,
    PageConsumer,
    Record,
    next_offsets,
    offsets_text,
)
from dedup_worker.worker.metrics import WorkerMetrics

logger = logging.getLogger(__name__)

#: How often the consumer-lag gauge is refreshed (it costs a ListOffsets round trip).
LAG_INTERVAL_S = 5.0
#: How often an INFO line reports progress (per-batch lines are DEBUG).
PROGRESS_INTERVAL_S = 10.0
#: Space kept in a dead letter for everything but the original bytes (reason, base64 growth).
_DLQ_OVERHEAD = 64 * 1024


class Engine(Protocol):
    """What the worker needs from ``dedup_worker.core.engine.DedupEngine``."""

    def process(self, pages: Sequence[Page]) -> list[Decision]: ...
    def prepare(self, pages: Sequence[Page]) -> Prepared: ...
    def decide(self, prepared: Prepared) -> list[Decision]: ...


class Worker:
    """Runs the consume-decide-produce loop until ``stop()``; see the module doc for the order."""

    def __init__(
        self,
        config: WorkerConfig,
        engine: Engine,
        consumer: PageConsumer,
        producer: DecisionProducer,
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
        self._backoff = Backoff(cap_s=config.backoff_max_ms / 1000)
        self._lag_due = 0.0
        self._progress = Progress(time.monotonic())
        # One thread that polls, decodes and prepares the next batch while this one is decided
        # (its Redis waits release the GIL). Only used when batches come full, i.e. a backlog:
        # at lower load a batch should take the pages that arrive while the previous one runs.
        self._prefetcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
        self._next: Future[Batch] | None = None

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
            while not self._stop.is_set():
                self.step()
        finally:
            self._close()

    def step(self) -> None:
        """Take one batch (prefetched or polled now) and see it through, or rewind it."""
        batch = self._take()
        self._refresh_lag()
        if not batch.records:
            return
        try:
            self._handle(batch)
        except BackendUnavailable as exc:
            self._retry_later(batch, exc)
        except OwnershipLost as exc:
            self.producer.abort()
            self._rewind(batch)
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
        records = self.consumer.poll_batch(
            self.config.batch_max_records, self.config.batch_max_wait_ms
        )
        started = time.perf_counter()
        batch = self._decode(records)
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

    def _consumer_idle(self) -> None:
        """Wait for the prefetch to finish: from here this thread alone uses the consumer."""
        if self._next is not None:
            wait([self._next])

    def _handle(self, batch: Batch) -> None:
        self._prefetch(batch)
        started = time.perf_counter()
        decisions = self._decide(batch)
        published = time.perf_counter()
        self._consumer_idle()
        if self.consumer.rebalances != batch.rebalances:
            # The prefetch's poll ran a rebalance: our partitions may have a new owner that
            # starts from the last commit. Redo the batch rather than race it.
            raise OwnershipLost("the group rebalanced while the batch was decided")
        offsets = self._publish(batch, decisions)
        finished = time.perf_counter()
        timing = Timing(batch.decode_seconds, published - started, finished - published)
        self._account(batch, decisions, timing)
        self._report_progress(len(batch.records), offsets)

    def _rewind(self, batch: Batch) -> None:
        """Seek back to the batch's first records, and to a prefetched batch's (dropped)."""
        records = list(batch.records)
        if self._next is not None:
            future, self._next = self._next, None
            try:
                records += future.result().records
            except NeardupError as exc:
                logger.warning("prefetched batch dropped: %s", exc)
        self.consumer.rewind(records)

    def _decode(self, records: list[Record]) -> Batch:
        batch = Batch(records, [], [], [])
        for record in records:
            raw = record.value if record.value is not None else b""  # a tombstone is bad input
            try:
                page = decode_page(raw, max_text_bytes=self.config.max_text_bytes)
            except ContractError as exc:
                batch.dead.append(self._dead_letter(record, exc))
            except RecursionError:  # json.loads on thousands of nested brackets
                error = ContractError("malformed_json", "JSON nested too deeply")
                batch.dead.append(self._dead_letter(record, error))
            else:
                batch.pages.append(page)
                batch.page_records.append(record)
        return batch

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
                batch.dead.append(self._dead_letter(record, error))
                batch.pages.remove(page)
        return encoded

    def _dead_letter(self, record: Record, exc: ContractError) -> DeadLetter:
        value: bytes = record.value if record.value is not None else b""
        detail = exc.detail
        # Base64 grows the original by 4/3: a body that cannot fit in one message is cut, and
        # the detail says so (the alternative, a DLQ record Kafka refuses, would stop the worker).
        room = (self.config.max_message_bytes - _DLQ_OVERHEAD) * 3 // 4
        if len(value) > room:
            detail += f" (original value of {len(value)} bytes truncated to {room} in the DLQ)"
            value = value[:room]
        logger.warning(
            "dead letter %s[%d]@%d: %s: %s",
            record.topic,
            record.partition,
            record.offset,
            exc.reason,
            exc.detail,
            extra=_where(record, reason=exc.reason),
        )
        return DeadLetter(
            reason=exc.reason,
            detail=detail,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=value,
            failed_at=self.clock(),
        )

    def _publish(self, batch: Batch, decisions: list[Encoded]) -> Offsets:
        """Produce decisions and dead letters, then commit them with the batch's offsets."""
        offsets = next_offsets(batch.records)
        self.producer.begin()
        try:
            topic = self.config.decisions_topic
            for d in decisions:
                self.producer.send(topic, d.key, d.value)
            for dead in batch.dead:
                self._send_dead_letter(dead)
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

    def _account(self, batch: Batch, encoded: list[Encoded], timing: Timing) -> None:
        decisions = [e.decision for e in encoded]
        self.metrics.pages.inc(len(batch.records))
        self.metrics.batch_size.observe(len(batch.records))
        self.metrics.engine_seconds.observe(timing.engine)
        self.metrics.commit_seconds.observe(timing.commit)
        self.metrics.batch_seconds.observe(timing.total)
        self.metrics.observe_decisions(decisions)
        for dead in batch.dead:
            self.metrics.dead_letters.labels(dead.reason).inc()
        corrections = len(decisions) - len(batch.pages)
        logger.debug(
            "batch of %d records: %d decisions (%d corrections), %d dead letters in %.1f ms "
            "(decode %.1f, engine %.1f, produce+commit %.1f)",
            len(batch.records),
            len(decisions),
            corrections,
            len(batch.dead),
            timing.total * 1000,
            timing.decode * 1000,
            timing.engine * 1000,
            timing.commit * 1000,
        )

    def _report_progress(self, records: int, offsets: Offsets) -> None:
        now = time.monotonic()
        progress = self._progress
        progress.records += records
        progress.offsets.update(offsets)
        if now - progress.since < PROGRESS_INTERVAL_S:
            return
        rate = progress.records / (now - progress.since)
        logger.info(
            "%d records in %.0f s (%.0f/s); committed up to %s",
            progress.records,
            now - progress.since,
            rate,
            offsets_text(progress.offsets),
            extra={"records": progress.records, "records_per_s": round(rate, 1)},
        )
        self._progress = Progress(now)

    # ---- failures and housekeeping -----------------------------------------------------------

    def _retry_later(self, batch: Batch, exc: BackendUnavailable) -> None:
        """Nothing of the batch is committed: rewind to it and wait before polling again."""
        records = batch.records
        self.producer.abort()
        self._rewind(batch)
        delay = self._backoff.next_delay()
        self.metrics.retries.inc()
        first = records[0]
        logger.warning(
            "backend unavailable at %s[%d]@%d, retrying batch of %d in %.1f s (attempt %d): %s",
            first.topic,
            first.partition,
            first.offset,
            len(records),
            delay,
            self._backoff.failures,
            exc,
            extra=_where(first, retry_in_s=delay),
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
        try:
            self.consumer.close()
        finally:
            self.producer.close()
        logger.info("worker stopped")


def _where(record: Record, **more: Any) -> dict[str, Any]:
    """Structured-log fields naming a record (picked up by the JSON formatter)."""
    return {"topic": record.topic, "partition": record.partition, "offset": record.offset, **more}
