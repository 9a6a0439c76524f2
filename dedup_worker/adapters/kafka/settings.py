"""How every Kafka client of the project is configured: one ``KafkaSettings``, one place.

The worker, the crawler, the ``neardup`` commands, the tests and the benchmarks all build their
librdkafka configuration here, so a setting (the broker list, security, the partitioner, the
group timeouts the embedded broker needs) is written once and means the same everywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import KafkaError

logger = logging.getLogger("dedup_worker.adapters.kafka")
#: librdkafka's own log lines (it logs little unless ``debug`` is set).
_client_logger = logger.getChild("librdkafka")

#: The partitioner of every producer: Kafka's default (murmur2 of the key, as the Java client
#: computes it; keyless records go to a random partition). The crawler's pages and the
#: worker's decisions are keyed by host, and any Kafka client outside this project partitions
#: a key the same way, so a host's records land in the same partition number whoever wrote
#: them. (librdkafka's own default, CRC32-based, would not.)
PARTITIONER = "murmur2_random"

#: Tansu joins a group in ~3 s with these (its defaults make a join take ~25 s); also fine for
#: Apache Kafka.
GROUP_TIMEOUTS: dict[str, int] = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}

#: Longest wait for one request (metadata, a transactional step, a topic creation) before it
#: fails; callers that can wait longer retry.
REQUEST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class KafkaSettings:
    """The broker and the client's identity: what every client of a process shares."""

    bootstrap: str
    client_id: str = "neardup"

    def client_config(
        self, extra: Mapping[str, Any] | None = None, *, quiet: bool = False
    ) -> dict[str, Any]:
        """The librdkafka configuration of one client, with ``extra`` keys (dotted names).

        ``quiet``: connection trouble is not logged (a readiness probe expects it)."""
        return {
            "bootstrap.servers": self.bootstrap,
            "client.id": self.client_id,
            "logger": _client_logger,
            "error_cb": _ignore_error if quiet else _log_client_error,
            **(extra or {}),
        }

    def producer_config(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A producer's configuration: idempotent, acknowledged by all replicas, and
        partitioned as every producer of the project (:data:`PARTITIONER`)."""
        producer = {"enable.idempotence": True, "acks": "all", "partitioner": PARTITIONER}
        return self.client_config({**producer, **(extra or {})})

    def with_client_id(self, client_id: str) -> KafkaSettings:
        return replace(self, client_id=client_id)


def _log_client_error(error: KafkaError) -> None:
    """librdkafka reports connection trouble here and retries by itself; a caller's request
    fails with a translated error if it lasts."""
    log = logger.error if error.fatal() else logger.warning
    log("kafka client: %s: %s", error.name(), error.str())


def _ignore_error(error: KafkaError) -> None:
    return None
