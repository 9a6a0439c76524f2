"""``dedup-worker``: parse the configuration, build the backends, run the loop until a signal.

Exit codes: 0 after a graceful stop (SIGTERM/SIGINT), 2 on a configuration error (one line on
stderr saying what to fix), 1 on any other error that stops the worker.
"""

from __future__ import annotations

import gc
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from dedup_worker.adapters.kafka import (
    DecisionProducer,
    PageConsumer,
    check_access,
    ensure_topics,
    fence,
)
from dedup_worker.adapters.kafka.consumer import LeaveTurn
from dedup_worker.adapters.kafka.settings import EMBEDDED_CLUSTER_ID
from dedup_worker.contract.messages import Page
from dedup_worker.core.engine import DedupEngine, EngineSettings
from dedup_worker.core.index_api import HammingIndex
from dedup_worker.core.memory_index import InMemoryIndex
from dedup_worker.core.planner import plan
from dedup_worker.core.records import DocStore, MemoryDocStore
from dedup_worker.core.sketch import RECOMMENDED_FEATURES
from dedup_worker.errors import BackendUnavailable, ConfigError, NeardupError
from dedup_worker.worker.batching import Backoff
from dedup_worker.worker.config import WorkerConfig, load_config
from dedup_worker.worker.identified_producer import IdentifiedProducer
from dedup_worker.worker.identity import build_identity
from dedup_worker.worker.metrics import InstrumentedIndex, WorkerMetrics
from dedup_worker.worker.service import Worker

logger = logging.getLogger(__name__)

#: Shards per index table and of the record store on Redis Cluster (16 and 64: even spread).
INDEX_CLUSTER_SHARD_BITS = 4
DOCS_CLUSTER_SHARD_BITS = 6

T = TypeVar("T")

#: Fields of a log record that are not structured extras.
_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(argv)
    except ConfigError as exc:
        print(f"dedup-worker: configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_level, config.log_format)
    try:
        return run(config)
    except KeyboardInterrupt:  # Ctrl-C during start-up, before the handlers are installed
        return 130


#: Collection thresholds of the worker (Python's default: 700, 10, 10). A batch keeps tens of
#: thousands of objects alive until it is decided (pages, records, decisions), so at 700 the
#: young generation was collected ~27 times a batch and every tenth of those went on to the
#: older ones: ~5 ms of collections a 1,000-page batch, holding the interpreter lock, against
#: ~1.3 ms at 20,000 (engine alone on real text, 20k pages). Nearly all of those objects die by
#: reference counting; the thresholds only decide how often cycles are looked for.
GC_THRESHOLDS = (20_000, 20, 20)


def settle_heap() -> None:
    """Freeze what start-up built and collect less often while batches run (see above)."""
    # Start-up leaves ~10^6 long-lived objects (numba, numpy, the clients); freezing them keeps
    # every full collection from walking them again mid-batch (a latency spike each time).
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run(config: WorkerConfig) -> int:
    """Build and run a worker with signal handlers; the exit code."""
    try:
        worker = build_worker(config)
    except ConfigError as exc:
        print(f"dedup-worker: configuration error: {exc}", file=sys.stderr)
        return 2
    except NeardupError as exc:
        logger.error("worker could not start: %s", exc)
        return 1
    _install_signal_handlers(worker)
    settle_heap()
    try:
        worker.run()
    except NeardupError as exc:
        logger.error("worker stopped by an error: %s", exc)
        return 1
    return 0


def build_worker(config: WorkerConfig, stop: threading.Event | None = None) -> Worker:
    """Everything a worker needs, connected; Redis being down at start-up is waited out."""
    metrics = WorkerMetrics()
    engine = _with_retries(lambda: build_engine(config, metrics), config, stop)
    kafka = config.kafka()
    # A refused login or TLS handshake stops the worker here, naming the settings to fix.
    cluster_id = _with_retries(lambda: check_access(kafka), config, stop)
    if config.create_topics:
        topics = [config.pages_topic, config.decisions_topic, config.dlq_topic]
        _with_retries(
            lambda: ensure_topics(kafka, topics, config.partitions, config.replication),
            config,
            stop,
        )
    producer = build_producer(config, stop)
    producer.warm_up([config.decisions_topic, config.dlq_topic])
    consumer = PageConsumer(
        kafka,
        config.pages_topic,
        config.group_id,
        fetch_wait_ms=config.fetch_wait_ms,
        max_message_bytes=config.max_message_bytes,
        leave_turn=build_leave_turn(config, cluster_id),
    )
    if config.metrics_port:
        metrics.serve(config.metrics_port)
    return Worker(config, engine, consumer, producer, metrics)


def build_leave_turn(config: WorkerConfig, cluster_id: str | None = None) -> LeaveTurn | None:
    """Workers of one group leave it one at a time (``redis_leave_turn``: the embedded broker's
    wedged groups) with ``NEARDUP_LEAVE_TURN=on``, or ``auto`` on rolling topics or the
    embedded stack's broker (``cluster_id``); without Redis there is one worker, so no turn.
    Until 29 Nov only a rolling topic's workers took turns, and two ``neardup crawl`` runs in a
    row against ``neardup up`` without topic generations stalled the second. On a Kafka
    cluster the turn only slows a stop of many workers (each waits for the one before)."""
    embedded = config.topic_generations or cluster_id == EMBEDDED_CLUSTER_ID
    if config.memory_backend or config.leave_turn == "off":
        return None
    if config.leave_turn == "auto" and not embedded:
        return None
    from dedup_worker.adapters.redis_client import connect
    from dedup_worker.adapters.redis_leave_turn import RedisLeaveTurn

    client = connect(config.redis_url, cluster=config.redis_cluster, secured=config.redis_security)
    return RedisLeaveTurn(client, config.index_namespace, config.group_id)


def build_producer(config: WorkerConfig, stop: threading.Event | None) -> IdentifiedProducer:
    """The decisions producer under this worker's identity: a fixed id, or a slot leased in
    Redis (Redis being down at start-up is waited out); see ``identity``."""
    kafka = config.kafka()
    identity = _with_retries(
        lambda: build_identity(config, lambda lapsed_id: fence(kafka, lapsed_id)), config, stop
    )

    def producer(transactional_id: str) -> DecisionProducer:
        return DecisionProducer(
            kafka,
            mode=config.transactional,
            transactional_id=transactional_id,
            max_message_bytes=config.max_message_bytes,
            commit_retry_ms=config.commit_retry_ms,
        )

    try:
        return IdentifiedProducer(identity, producer)
    except BaseException:
        identity.close(clean=True)  # nothing was produced under it
        raise


def build_engine(config: WorkerConfig, metrics: WorkerMetrics) -> DedupEngine:
    """The engine over the configured backend, with the planner's table design."""
    settings = engine_settings(config)
    index, docs = build_backends(config, settings.version_tag)
    # Cached records could outlive their expiry in Redis: no cache when records expire.
    cached = 0 if config.ttl_seconds else config.record_cache
    engine = DedupEngine(InstrumentedIndex(index, metrics), docs, settings, record_cache=cached)
    warm_up(engine, index)
    return engine


#: Pages that run every text kernel: ASCII, a few non-ASCII words, and dense non-ASCII text.
_WARM_UP_TEXTS = (
    "warm up the kernels of the worker " * 8,
    "warm up the kernels: Größe, naïve café, ﬁle, Ｆｕｌｌ " * 8,
    "Прогрев ядер перед первой партией страниц. Ελληνικά. 日本語のテキスト " * 8,
)


def warm_up(engine: DedupEngine, index: HammingIndex) -> None:
    """Compile (or load from numba's cache) every kernel a batch runs, before the first batch:
    with a cold cache, a first batch that compiled them took ~25 s. The index is only queried,
    so nothing is stored."""
    engine.prepare(
        [
            Page(url=f"https://warm-up.invalid/{i}", host="warm-up.invalid", fetched_at=0.0,
                 text=text, title="warm up")
            for i, text in enumerate(_WARM_UP_TEXTS)
        ]
    )  # fmt: skip
    index.query(np.zeros(1, dtype=np.uint64))


def engine_settings(config: WorkerConfig) -> EngineSettings:
    """The engine's recommended rule, with the knobs the configuration exposes."""
    sketch = config.sketch() if config.verify else None
    features = replace(
        RECOMMENDED_FEATURES,
        shingle=config.shingle,
        tf_cap=config.tf_cap,
        drop_stop_words=config.drop_stop_words,
    )
    return EngineSettings(k=config.k, features=features, sketch=sketch)


def build_backends(config: WorkerConfig, version_tag: str) -> tuple[HammingIndex, DocStore]:
    bound = config.max_bytes_per_fingerprint or None
    chosen = plan(
        config.expected_pages,
        config.tables_k,
        max_bytes=bound,
        radius=config.k,
        replicas=config.table_replicas,
    )
    logger.info("index design: %s", chosen.reason)
    if config.k > config.tables_k:
        shares = ", ".join(f"{d}: {share:.0%}" for d, share in chosen.coverage().items())
        logger.info(
            "share of candidates the tables find per distance (bits at random positions, "
            "before the flips): %s",
            shares,
        )
    elif config.probe_flips:
        logger.info(
            "NEARDUP_PROBE_FLIPS=%d changes nothing: the tables find every page within "
            "NEARDUP_K=%d already",
            config.probe_flips,
            config.k,
        )
    if config.memory_backend:
        in_memory = InMemoryIndex(chosen.design(), radius=config.k, flips=config.probe_flips)
        return in_memory, MemoryDocStore()
    from dedup_worker.adapters.redis_client import connect
    from dedup_worker.adapters.redis_docs import RedisDocStore
    from dedup_worker.adapters.redis_index import RedisIndex

    client = connect(config.redis_url, cluster=config.redis_cluster, secured=config.redis_security)
    ttl = config.ttl_seconds or None
    # Shards spread a namespace over a cluster's nodes, at one script call per shard and batch
    # step. One Redis gains nothing from them, so it gets one shard per table: a batch step is
    # then one call (the layout is fixed when a namespace is created; see the README).
    index_shards, docs_shards = (
        (INDEX_CLUSTER_SHARD_BITS, DOCS_CLUSTER_SHARD_BITS) if (config.redis_cluster) else (0, 0)
    )
    index = RedisIndex(
        client,
        chosen.design(),
        version_tag,
        namespace=config.index_namespace,
        expected_n=config.expected_pages,
        ttl=ttl,
        shard_bits=index_shards,
        radius=config.k,
        flips=config.probe_flips,
    )
    # Records hold fingerprints: a new fingerprint version must not compare against old ones.
    docs_namespace = f"{config.index_namespace}.{version_tag}"
    docs = RedisDocStore(
        client, docs_namespace, ttl, expected_n=config.expected_pages, shard_bits=docs_shards
    )
    return index, docs


def _with_retries(build: Callable[[], T], config: WorkerConfig, stop: threading.Event | None) -> T:
    """``build()``, retried with backoff while Redis or Kafka is unreachable (until ``stop``)."""
    backoff = Backoff(cap_s=config.backoff_max_ms / 1000)
    stop = stop or threading.Event()
    while True:
        try:
            return build()
        except BackendUnavailable as exc:
            delay = backoff.next_delay()
            logger.warning("start-up: %s; retrying in %.1f s", exc, delay)
            if stop.wait(delay):
                raise


def _install_signal_handlers(worker: Worker) -> None:
    def request_stop(signum: int, frame: object) -> None:
        logger.info("%s: finishing the current batch, then stopping", signal.Signals(signum).name)
        worker.stop()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)


# ---- logging (configured here only) --------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the record's structured extras (partition, offset...)."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        body.update({k: v for k, v in vars(record).items() if k not in _RESERVED})
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


if __name__ == "__main__":
    sys.exit(main())
