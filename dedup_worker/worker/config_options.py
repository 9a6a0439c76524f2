"""The worker's options: one ``Option`` per ``WorkerConfig`` field, with its parser and help.

Each option is read from ``NEARDUP_`` + the field name in upper case, or from the flag ``--`` +
the field name with dashes (:mod:`dedup_worker.worker.config` combines them). The parsers
(:mod:`dedup_worker.config_values`) raise ``ConfigError`` naming the variable or flag and what
a good value looks like.
"""

from __future__ import annotations

from dataclasses import dataclass

from dedup_worker import config_values as parse
from dedup_worker.adapters.kafka.settings import CODECS
from dedup_worker.config_values import Parser

ENV_PREFIX = "NEARDUP_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class Option:
    field: str
    parse: Parser
    help: str

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.field.upper()

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")


_MIB = 1024 * 1024
OPTIONS: tuple[Option, ...] = (
    Option("kafka_bootstrap", parse.bootstrap, "Kafka bootstrap servers, host:port[,host:port]"),
    Option("redis_url", parse.redis_url, "redis://host:port/db, or 'memory' (one process only)"),
    Option("redis_cluster", parse.boolean, "the Redis URL names a Redis Cluster node"),
    Option(
        "kafka_compression",
        parse.choice(*CODECS),
        "codec of the records this worker produces (decisions, dead letters): " + ", ".join(CODECS),
    ),
    Option("pages_topic", parse.topic, "topic the crawler publishes pages to"),
    Option("decisions_topic", parse.topic, "topic decisions are published to"),
    Option("dlq_topic", parse.dlq, "dead-letter topic (default: <pages topic>.dlq)"),
    Option("group_id", parse.name, "Kafka consumer group shared by all workers"),
    Option(
        "worker_id",
        parse.name,
        "fixed id of this worker (default: a slot leased in Redis; the host name with "
        "NEARDUP_REDIS_URL=memory or NEARDUP_TRANSACTIONAL=off)",
    ),
    Option(
        "k",
        parse.integer(0, 8),
        "Hamming distance at or below which earlier pages are near-duplicate candidates",
    ),
    Option(
        "tables_k",
        parse.integer(0, 8),
        "distance up to which the index tables find every candidate (default min(3, k)); "
        "beyond it, up to k, those agreeing on one table's key bits (neardup plan --radius)",
    ),
    Option(
        "table_replicas",
        parse.integer(1, 4),
        "repeat the index tables over this many orders of the bits: each finds more of the "
        "candidates beyond the tables' k, and costs as much memory and Redis time again",
    ),
    Option(
        "probe_flips",
        parse.integer(0, 3),
        "key bits of each index table a probe also tries flipped, the page's weakest there (the "
        "bits whose votes came closest to a tie): reaches near-duplicates beyond the tables' k "
        "that agree on no key; each doubles the buckets a probe reads (0 = off)",
    ),
    Option(
        "shingle",
        parse.integer(1, 8),
        "words per simhash feature (default 1: single words; see README, detection quality)",
    ),
    Option(
        "tf_cap",
        parse.integer(0, 64),
        "votes a feature gets per page at most (its term frequency, capped; 0 = no cap)",
    ),
    Option(
        "drop_stop_words",
        parse.boolean,
        "leave English stop words out of the fingerprint: its bits are less biased, so the "
        "index's probes read far fewer entries as it grows, at some recall on short pages "
        "(README, detection quality)",
    ),
    Option("verify", parse.boolean, "verify candidates by sketch resemblance (off: simhash only)"),
    Option("verify_threshold", parse.number(0, 1), "resemblance a verified near-duplicate needs"),
    Option("sketch_bins", parse.power_of_two(16, 4096), "bins of the verification sketch"),
    Option("sketch_bits", parse.choice_int(1, 2, 4, 8, 16), "bits kept per sketch bin"),
    Option("batch_max_records", parse.integer(1, 100_000), "most pages per batch"),
    Option(
        "batch_max_wait_ms",
        parse.integer(0, 60_000),
        "longest wait for a batch's first page (a batch takes the pages already fetched)",
    ),
    Option(
        "batch_interval_ms",
        parse.integer(0, 10_000),
        "shortest time from one batch's poll to the next's: a batch that is not full waits for "
        "more pages until then (fewer, larger transactions; 0: take what is there)",
    ),
    Option(
        "fetch_wait_ms",
        parse.integer(0, 500),
        "longest the broker may hold a fetch with no new pages (Tansu holds it that long even "
        "when pages arrive, so it adds to latency; Kafka answers at once)",
    ),
    Option("transactional", parse.choice("auto", "on", "off"), "Kafka transactions: auto/on/off"),
    Option("create_topics", parse.boolean, "create missing topics at start-up"),
    Option(
        "topic_generations",
        parse.boolean,
        "pages and decisions live as rolling generations <topic>.gN, so each fetch lists a "
        "bounded number of batches (on for the embedded stack, whose broker lists them all)",
    ),
    Option(
        "leave_turn",
        parse.choice("auto", "on", "off"),
        "workers sharing Redis leave their group one at a time, which the embedded broker "
        "(Tansu 0.6.0) needs or the group wedges: auto (with topic_generations, or on the "
        "embedded stack's broker), on, off (a Kafka cluster stops many workers faster)",
    ),
    Option(
        "generation_records",
        parse.integer(100, 10_000_000),
        "with topic_generations: records (offsets) one partition of the newest generation holds "
        "before the stack rolls to the next; bounds the batches the broker lists per fetch",
    ),
    Option("partitions", parse.integer(1, 10_000), "partitions of topics created at start-up"),
    Option("replication", parse.integer(1, 16), "replication factor of topics created at start-up"),
    Option("metrics_port", parse.integer(0, 65535), "Prometheus metrics HTTP port (0 = off)"),
    Option(
        "expected_pages", parse.integer(1, 1 << 40), "expected number of indexed pages (planner)"
    ),
    Option("max_bytes_per_fingerprint", parse.number(0, 1e6), "planner memory bound (0 = none)"),
    Option("index_namespace", parse.name, "Redis key namespace of the index and page records"),
    Option("ttl_seconds", parse.integer(0, 1 << 31), "fingerprint lifetime in Redis (0 = forever)"),
    Option(
        "record_cache",
        parse.integer(0, 1 << 31),
        "candidate page records kept in process, ~700 B each (0 = none; off when records "
        "expire, with NEARDUP_TTL_SECONDS)",
    ),
    Option("max_text_bytes", parse.integer(1, 1 << 31), "larger page texts go to the DLQ"),
    Option("max_message_bytes", parse.integer(_MIB, 1 << 31), "largest message the worker sends"),
    Option("backoff_max_ms", parse.integer(10, 3_600_000), "cap of the retry backoff"),
    Option(
        "commit_retry_ms",
        parse.integer(0, 3_600_000),
        "how long a transaction's commit retries in place while the broker is unreachable, "
        "before the batch is aborted and redone",
    ),
    Option(
        "lease_ttl_ms",
        parse.integer(1000, 600_000),
        "a worker slot's lease lapses this long after its last renewal (a dead worker's open "
        "transaction is aborted about this long after it died)",
    ),
    Option(
        "lease_renew_ms", parse.integer(100, 200_000), "how often a worker renews its slot lease"
    ),
    Option(
        "worker_slots", parse.integer(1, 100_000), "most workers of one group at a time (slots)"
    ),
    Option("log_level", parse.choice(*LOG_LEVELS, upper=True), "DEBUG, INFO, WARNING or ERROR"),
    Option("log_format", parse.choice("text", "json"), "log line format: text or json"),
)
