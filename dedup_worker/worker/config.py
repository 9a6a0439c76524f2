"""The worker's configuration: one frozen ``WorkerConfig`` from ``NEARDUP_*`` variables and flags.

Every option has an environment variable (``NEARDUP_`` + the field name in upper case) and a
flag (``--`` + the field name with dashes); a flag wins over the variable, the variable over the
default. Every value is checked at start-up, and a bad one raises ``ConfigError`` naming the
variable or flag it came from and what a good value looks like, so an operator can fix it
without reading code.

The Kafka and Redis security settings (TLS, SASL, passwords) are read from the environment
only, never from flags (a flag shows in the process list), by the same code as the crawler's
and the ``neardup`` commands' (:class:`~dedup_worker.adapters.kafka.KafkaSecurity`,
:class:`~dedup_worker.adapters.redis_client.RedisSecurity`); secrets never appear in
:meth:`WorkerConfig.describe` or its ``repr``.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from dedup_worker import config_values as parse
from dedup_worker.adapters.kafka.generations import looks_like_generation
from dedup_worker.adapters.kafka.settings import KafkaSecurity, KafkaSettings
from dedup_worker.adapters.redis_client import RedisSecurity
from dedup_worker.adapters.security import environment, redact_url
from dedup_worker.config_values import MEMORY_BACKEND
from dedup_worker.contract.messages import DEFAULT_MAX_TEXT_BYTES
from dedup_worker.core.sketch import SketchConfig
from dedup_worker.errors import ConfigError
from dedup_worker.worker.config_options import OPTIONS

logger = logging.getLogger(__name__)

#: NEARDUP_TABLES_K when unset (or NEARDUP_K if smaller): README, "Detection quality".
DEFAULT_TABLES_K = 3
TransactionMode = Literal["auto", "on", "off"]
LogFormat = Literal["text", "json"]


@dataclass(frozen=True, repr=False)
class WorkerConfig:
    """Everything one worker process needs; built by :func:`load_config`, never mutated.
    Its ``repr`` is :meth:`describe` (a password in the Redis URL is not shown)."""

    kafka_bootstrap: str = "127.0.0.1:9092"
    redis_url: str = MEMORY_BACKEND
    redis_cluster: bool = False
    kafka_compression: str = "none"
    pages_topic: str = "pages"
    decisions_topic: str = "decisions"
    dlq_topic: str = ""  # "" means "<pages_topic>.dlq"
    group_id: str = "neardup-dedup"
    worker_id: str = ""  # "": a slot leased in Redis, or the host name (memory, no transactions)
    k: int = 8
    tables_k: int = -1  # -1 means min(3, k)
    table_replicas: int = 2
    probe_flips: int = 1
    shingle: int = 1
    tf_cap: int = 4
    drop_stop_words: bool = False
    verify: bool = True  # check fingerprint candidates with the MinHash sketch
    verify_threshold: float = 0.9
    sketch_bins: int = 1024
    sketch_bits: int = 2
    batch_max_records: int = 1000
    batch_max_wait_ms: int = 50
    # Each batch is one transaction whatever its size; 50 ms keeps them to 20 a second (Kafka
    # Streams commits every 100 ms under exactly-once). Soak, 1,000 pages/s: the broker, worker
    # and Redis together ~10% less CPU, p50 +15-25 ms (README, "The embedded stack's limits").
    batch_interval_ms: int = 50
    fetch_wait_ms: int = 5
    transactional: TransactionMode = "auto"
    create_topics: bool = True
    topic_generations: bool = False  # pages and decisions roll as generations (README)
    leave_turn: TransactionMode = "auto"  # leave the group one worker at a time (README)
    generation_records: int = 4000
    partitions: int = 4
    replication: int = 1
    metrics_port: int = 0
    expected_pages: int = 1_000_000
    max_bytes_per_fingerprint: float = 0.0  # 0 = no bound for the planner
    index_namespace: str = "neardup"
    ttl_seconds: int = 0  # 0 = fingerprints never expire
    record_cache: int = 100_000  # candidate records kept in process (~700 B each); off with a TTL
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES
    max_message_bytes: int = 128 * 1024 * 1024
    backoff_max_ms: int = 30_000
    commit_retry_ms: int = 120_000
    lease_ttl_ms: int = 10_000
    lease_renew_ms: int = 2_000
    worker_slots: int = 1024
    log_level: str = "INFO"
    log_format: LogFormat = "text"
    # Read from the environment only (see the module doc), not options with flags.
    kafka_security: KafkaSecurity = field(default_factory=KafkaSecurity)
    redis_security: RedisSecurity = field(default_factory=RedisSecurity)

    @property
    def memory_backend(self) -> bool:
        return self.redis_url == MEMORY_BACKEND

    def sketch(self) -> SketchConfig:
        """The verification sketch these settings describe."""
        return SketchConfig(
            log2_bins=self.sketch_bins.bit_length() - 1,
            bits=self.sketch_bits,
            threshold=self.verify_threshold,
        )

    @property
    def leased_identity(self) -> bool:
        """No fixed worker id: the worker leases a slot in Redis and produces under the slot's
        transactional id (see ``dedup_worker.core.slots``)."""
        return not self.worker_id

    @property
    def transactional_id(self) -> str:
        """The transactional id of a fixed worker id: a restarted worker with the same id
        fences its dead predecessor (and aborts the transaction it left open)."""
        return transactional_id(self.group_id, self.worker_id)

    @property
    def client_name(self) -> str:
        """Kafka ``client.id``: the worker id, or the host name for a leased one."""
        return f"dedup-worker-{self.worker_id or host_name()}"

    def kafka(self, client_id: str | None = None) -> KafkaSettings:
        """The settings of this process's Kafka clients (default id: the worker's)."""
        settings = KafkaSettings(
            self.kafka_bootstrap,
            client_id=client_id or self.client_name,
            security=self.kafka_security,
            compression=self.kafka_compression,
        )
        if self.topic_generations:
            return settings.rolling_topics(self.pages_topic, self.decisions_topic)
        return settings

    def __repr__(self) -> str:
        return f"WorkerConfig({self.describe()})"

    def describe(self) -> str:
        """One log line with the settings that matter when reading a worker's log; never a
        secret."""
        redis_security = self.redis_security.describe()
        return (
            f"kafka={self.kafka().describe()} redis={redact_url(self.redis_url)}"
            f"{' (cluster)' if self.redis_cluster else ''}"
            f"{f' ({redis_security})' if redis_security else ''} topics={self.pages_topic}->"
            f"{self.decisions_topic},{self.dlq_topic}"
            f"{' (rolling generations)' if self.topic_generations else ''} group={self.group_id} "
            f"worker={self.worker_id or '(leased slot)'} k={self.k} tables_k={self.tables_k}"
            f"x{self.table_replicas} flips={self.probe_flips} "
            f"shingle={self.shingle} tf_cap={self.tf_cap} "
            f"{'stop_words=dropped ' if self.drop_stop_words else ''}"
            f"sketch={self.sketch_bins}x{self.sketch_bits if self.verify else 'off'} "
            f"batch={self.batch_max_records}/{self.batch_max_wait_ms}ms"
            f"/every {self.batch_interval_ms}ms "
            f"transactional={self.transactional} namespace={self.index_namespace}"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per option (defaults None, so an unset flag leaves the variable in force)."""
    for option in OPTIONS:
        help_text = f"{option.help} [{option.env}]"
        if option.parse is parse.boolean:
            action = argparse.BooleanOptionalAction
            parser.add_argument(option.flag, dest=option.field, action=action, help=help_text)
        else:
            parser.add_argument(option.flag, dest=option.field, metavar="VALUE", help=help_text)


def from_namespace(args: argparse.Namespace, env: Mapping[str, str]) -> WorkerConfig:
    """Combine parsed flags and environment into a validated ``WorkerConfig``."""
    values: dict[str, Any] = {}
    for option in OPTIONS:
        flag_value = getattr(args, option.field, None)
        if isinstance(flag_value, bool):
            values[option.field] = flag_value
        elif flag_value is not None:
            values[option.field] = option.parse(str(flag_value), option.flag)
        elif option.env in env:
            values[option.field] = option.parse(env[option.env], option.env)
    lookup = environment(env)
    values["kafka_security"] = KafkaSecurity.from_settings(lookup)
    values["redis_security"] = RedisSecurity.from_settings(lookup)
    return _resolved(WorkerConfig(**values))


def load_config(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> WorkerConfig:
    """Parse ``argv`` and ``env`` (default: the process's); ConfigError says what to fix."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return from_namespace(args, os.environ if env is None else env)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dedup-worker",
        description="Streaming near-duplicate detection: pages in, decisions out.",
    )
    add_arguments(parser)
    return parser


def _resolved(config: WorkerConfig) -> WorkerConfig:
    """Fill the derived defaults, then check the options against each other."""
    config = replace(
        config,
        dlq_topic=config.dlq_topic or f"{config.pages_topic}.dlq",
        worker_id=config.worker_id or _default_worker_id(config),
        tables_k=config.tables_k if config.tables_k >= 0 else min(DEFAULT_TABLES_K, config.k),
    )
    _check_together(config)
    return config


def _default_worker_id(config: WorkerConfig) -> str:
    """ "" (lease a slot in Redis at start-up) when there is Redis and transactions may be used.

    The transactional id must be stable across restarts, so that a restarted worker fences its
    dead predecessor and aborts the transaction it left open (Tansu never times one out, and
    read_committed readers would wait behind it forever), yet distinct between live workers,
    which would fence each other. Slots leased in Redis give both with one environment for every
    process (see ``dedup_worker.core.slots``). Without Redis (``memory``: the index lives in
    the process, so there is one process by definition) the host name is stable and a second
    process on the host is refused at start-up; without transactions the id only names the
    Kafka client."""
    if config.memory_backend or config.transactional == "off":
        return host_name()
    return ""


def host_name() -> str:
    """The host name, as a worker id may spell it."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:200] or "worker"


def transactional_id(group_id: str, worker_id: str) -> str:
    """The Kafka transactional id of worker ``worker_id`` (fixed, or a slot's name) in a group."""
    return f"{group_id}.{worker_id}"


def _check_together(config: WorkerConfig) -> None:
    topics = [config.pages_topic, config.decisions_topic, config.dlq_topic]
    if len(set(topics)) != len(topics):
        raise ConfigError(
            "NEARDUP_PAGES_TOPIC, NEARDUP_DECISIONS_TOPIC and NEARDUP_DLQ_TOPIC must be "
            f"three different topics, got {', '.join(topics)}"
        )
    if config.topic_generations:
        rolling = (config.pages_topic, config.decisions_topic)
        for name, topic in (("NEARDUP_DECISIONS_TOPIC", config.decisions_topic),
                            ("NEARDUP_DLQ_TOPIC", config.dlq_topic)):  # fmt: skip
            if looks_like_generation(topic, rolling):
                raise ConfigError(
                    f"{name}={topic} reads as a generation of a rolling topic while "
                    "NEARDUP_TOPIC_GENERATIONS is on: choose a name that does not end in .g<N>"
                )
        _check_fetch_wait(config)
    if not config.memory_backend:
        config.redis_security.check_url(config.redis_url)
    if config.memory_backend and config.redis_cluster:
        raise ConfigError("NEARDUP_REDIS_CLUSTER needs a redis:// URL in NEARDUP_REDIS_URL")
    if config.tables_k > config.k:
        raise ConfigError(
            f"NEARDUP_TABLES_K ({config.tables_k}) must not exceed NEARDUP_K ({config.k}): the "
            "tables' k is the part of the search radius they cover completely"
        )
    if config.verify:
        try:
            config.sketch().check_precision()
        except ConfigError as exc:
            raise ConfigError(
                f"NEARDUP_SKETCH_BINS / NEARDUP_SKETCH_BITS / NEARDUP_VERIFY_THRESHOLD: {exc}"
            ) from None
    if config.lease_renew_ms * 3 > config.lease_ttl_ms:
        raise ConfigError(
            "NEARDUP_LEASE_RENEW_MS must be at most a third of NEARDUP_LEASE_TTL_MS "
            f"({config.lease_ttl_ms}), so a lease survives two missed renewals; got "
            f"{config.lease_renew_ms}"
        )
    if config.max_message_bytes < config.max_text_bytes:
        raise ConfigError(
            "NEARDUP_MAX_MESSAGE_BYTES must be at least NEARDUP_MAX_TEXT_BYTES "
            f"({config.max_text_bytes}), got {config.max_message_bytes}"
        )


#: Tansu (memory storage) lists every batch a partition holds on each fetch: ~1.2 ms per 1,000
#: batches here; a fetch wait under about half that listing delivers nothing at all (measured:
#: 5 ms stalls at 12k batches, not at 8k). README, "The embedded stack's limits".
LISTING_MS_PER_1000_BATCHES = 1.2


def _check_fetch_wait(config: WorkerConfig) -> None:
    """A full generation must not make the broker's fetches outlast the fetch wait."""
    listing_ms = LISTING_MS_PER_1000_BATCHES * config.generation_records / 1000
    if config.fetch_wait_ms < listing_ms / 2:
        raise ConfigError(
            f"NEARDUP_FETCH_WAIT_MS={config.fetch_wait_ms} is too short for "
            f"NEARDUP_GENERATION_RECORDS={config.generation_records}: a full partition takes the "
            f"broker ~{listing_ms:.0f} ms to list per fetch, and a wait under half that can "
            f"deliver nothing; raise NEARDUP_FETCH_WAIT_MS to at least {listing_ms / 2:.0f} or "
            "lower NEARDUP_GENERATION_RECORDS"
        )


def field_names() -> list[str]:
    """The option names, in declaration order (documentation and tests)."""
    security = ("kafka_security", "redis_security")
    return [f.name for f in fields(WorkerConfig) if f.name not in security]
