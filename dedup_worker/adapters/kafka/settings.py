"""How every Kafka client of the project is configured: one ``KafkaSettings``, one place.

The worker, the crawler, the ``neardup`` commands, the tests and the benchmarks all build their
librdkafka configuration here, so a setting (the broker list, TLS and SASL, the partitioner,
the group timeouts the embedded broker needs) is written once and means the same everywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import KafkaError

from dedup_worker.adapters import security
from dedup_worker.adapters.security import NO_SECRET, Lookup, Secret
from dedup_worker.errors import ConfigError

logger = logging.getLogger("dedup_worker.adapters.kafka")
#: librdkafka's own log lines (it logs little unless ``debug`` is set).
_client_logger = logger.getChild("librdkafka")


class _DeletedTopicsAtDebug(logging.Filter):
    """librdkafka logs at INFO, at its next metadata refresh (every 5 min), that a topic the
    client used is gone: "partition count changed from N to 0". With rolling topic generations
    that is a line per deleted generation and client, in bursts of ~60 every 5 minutes in a
    worker's log; the roller logs each deletion already. Such lines go to DEBUG instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if record.levelno != logging.INFO or not args or args[0] != "PARTCNT":
            return True
        if not str(args[-1]).endswith(" to 0"):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return _client_logger.isEnabledFor(logging.DEBUG)


_client_logger.addFilter(_DeletedTopicsAtDebug())

#: The partitioner of every producer: Kafka's default (murmur2 of the key, as the Java client
#: computes it; keyless records go to a random partition). The crawler's pages and the
#: worker's decisions are keyed by host, and any Kafka client outside this project partitions
#: a key the same way, so a host's records land in the same partition number whoever wrote
#: them. (librdkafka's own default, CRC32-based, would not.)
PARTITIONER = "murmur2_random"

#: Tansu joins a group in ~3 s with these (its defaults make a join take ~25 s); also fine for
#: Apache Kafka.
GROUP_TIMEOUTS: dict[str, int] = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}

#: The cluster id of the embedded stack's broker (Tansu, started by ``neardup up`` and
#: ``neardup crawl``): its consumer groups need the leave turn (``redis_leave_turn``).
EMBEDDED_CLUSTER_ID = "neardup"

#: Longest wait for one request (metadata, a transactional step, a topic creation) before it
#: fails; callers that can wait longer retry.
REQUEST_TIMEOUT_S = 30.0


PROTOCOL = "NEARDUP_KAFKA_SECURITY_PROTOCOL"
MECHANISM = "NEARDUP_KAFKA_SASL_MECHANISM"
USERNAME = "NEARDUP_KAFKA_SASL_USERNAME"
PASSWORD = "NEARDUP_KAFKA_SASL_PASSWORD"
CA_FILE = "NEARDUP_KAFKA_TLS_CA_FILE"
CERT_FILE = "NEARDUP_KAFKA_TLS_CERT_FILE"
KEY_FILE = "NEARDUP_KAFKA_TLS_KEY_FILE"
KEY_PASSWORD = "NEARDUP_KAFKA_TLS_KEY_PASSWORD"
CHECK_HOSTNAME = "NEARDUP_KAFKA_TLS_CHECK_HOSTNAME"
#: Every Kafka security setting, in the order the README documents them.
SECURITY_SETTINGS = (
    PROTOCOL, MECHANISM, USERNAME, PASSWORD, CA_FILE, CERT_FILE, KEY_FILE, KEY_PASSWORD,
    CHECK_HOSTNAME,
)  # fmt: skip

#: Compression of every record the project's producers write (Kafka's ``compression.type``).
COMPRESSION = "NEARDUP_KAFKA_COMPRESSION"
#: librdkafka's codecs; the confluent-kafka wheels build all of them in.
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class KafkaSecurity:
    """TLS and SASL of the Kafka clients (Kafka's own ``security.protocol`` values).

    Built by :meth:`from_settings`, which refuses half-configured security (credentials given
    but a protocol that does not send them, a missing file), naming the setting to fix."""

    protocol: str = "plaintext"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: Secret = NO_SECRET
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_key_password: Secret = NO_SECRET
    tls_check_hostname: bool = True

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("sasl_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("ssl", "sasl_ssl")

    @classmethod
    def from_settings(cls, lookup: Lookup) -> KafkaSecurity:
        """The security settings of ``lookup`` (the ``NEARDUP_KAFKA_*`` names above)."""
        found = cls(
            protocol=security.choice(lookup, PROTOCOL, PROTOCOLS, "plaintext"),
            sasl_mechanism=security.choice(lookup, MECHANISM, MECHANISMS, ""),
            sasl_username=security.text(lookup, USERNAME),
            sasl_password=security.secret(lookup, PASSWORD),
            tls_ca_file=security.readable_file(lookup, CA_FILE),
            tls_cert_file=security.readable_file(lookup, CERT_FILE),
            tls_key_file=security.readable_file(lookup, KEY_FILE),
            tls_key_password=security.secret(lookup, KEY_PASSWORD),
            tls_check_hostname=security.boolean(lookup, CHECK_HOSTNAME, True),
        )
        found.check()
        return found

    def check(self) -> None:
        """Settings that only make sense together; ConfigError names what to fix."""
        sasl_given = [n for n, v in self._sasl_values() if v]
        tls_given = [n for n, v in self._tls_values() if v]
        if self.sasl:
            missing = [n for n, v in self._sasl_values() if not v]
            if missing:
                raise ConfigError(
                    f"{PROTOCOL}={self.protocol} needs {', '.join(missing)} "
                    f"({MECHANISM}: one of {', '.join(MECHANISMS)})"
                )
        elif sasl_given:
            raise ConfigError(
                f"{', '.join(sasl_given)} set, but {PROTOCOL}={self.protocol} sends no SASL "
                "credentials: set it to sasl_ssl (or sasl_plaintext)"
            )
        if tls_given and not self.tls:
            raise ConfigError(
                f"{', '.join(tls_given)} set, but {PROTOCOL}={self.protocol} does not use TLS: "
                "set it to ssl or sasl_ssl"
            )
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ConfigError(f"a client certificate needs both {CERT_FILE} and {KEY_FILE}")

    def _sasl_values(self) -> list[tuple[str, object]]:
        return [
            (MECHANISM, self.sasl_mechanism),
            (USERNAME, self.sasl_username),
            (PASSWORD, self.sasl_password),
        ]

    def _tls_values(self) -> list[tuple[str, object]]:
        return [
            (CA_FILE, self.tls_ca_file),
            (CERT_FILE, self.tls_cert_file),
            (KEY_FILE, self.tls_key_file),
            (KEY_PASSWORD, self.tls_key_password),
        ]

    def client_config(self) -> dict[str, str]:
        """The librdkafka keys for these settings (the only place secrets are revealed)."""
        config = {"security.protocol": self.protocol}
        if self.sasl:
            config.update(
                {
                    "sasl.mechanism": self.sasl_mechanism,
                    "sasl.username": self.sasl_username,
                    "sasl.password": self.sasl_password.reveal(),
                }
            )
        if self.tls:
            config["ssl.endpoint.identification.algorithm"] = (
                "https" if self.tls_check_hostname else "none"
            )
            files = {
                "ssl.ca.location": self.tls_ca_file,
                "ssl.certificate.location": self.tls_cert_file,
                "ssl.key.location": self.tls_key_file,
                "ssl.key.password": self.tls_key_password.reveal(),
            }
            config.update({key: value for key, value in files.items() if value})
        return config

    def describe(self) -> str:
        """For logs: the protocol, mechanism, user and files; never a secret."""
        parts = [self.protocol]
        if self.sasl:
            parts.append(f"{self.sasl_mechanism} user={self.sasl_username}")
        if self.tls_ca_file:
            parts.append(f"ca={self.tls_ca_file}")
        if self.tls_cert_file:
            parts.append(f"cert={self.tls_cert_file}")
        return " ".join(parts)


@dataclass(frozen=True)
class KafkaSettings:
    """The broker, the client's identity and its security: what every client of a process
    shares."""

    bootstrap: str
    client_id: str = "neardup"
    security: KafkaSecurity = KafkaSecurity()
    #: Topics that live as rolling generations (``generations.py``); empty: none, the topic
    #: names are used as they are (the default, and what Apache Kafka deployments want).
    rolling: frozenset[str] = frozenset()
    #: Codec of the producers' record batches (one of :data:`CODECS`). Pages are text, which
    #: lz4 and zstd shrink 2-3 times: less network and broker memory or disk, for some CPU in
    #: the producer (consumers decompress in librdkafka's threads).
    compression: str = "none"

    def __post_init__(self) -> None:
        if self.compression not in CODECS:
            raise ConfigError(
                f"{COMPRESSION} must be one of {', '.join(CODECS)}, got {self.compression!r}"
            )

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
            **self.security.client_config(),
            # Rolling generations: a metadata request for a topic must never create it. A
            # producer re-reads the metadata of every topic it ever wrote to (every 5 min),
            # and Tansu created every deleted generation again on that request (seen as
            # dozens of deletions at once in soaks, each a topic the roller deleted before).
            **({"allow.auto.create.topics": False} if self.rolling else {}),
            **(extra or {}),
        }

    def producer_config(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A producer's configuration: idempotent, acknowledged by all replicas, and
        partitioned as every producer of the project (:data:`PARTITIONER`)."""
        producer = {
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": PARTITIONER,
            "compression.type": self.compression,
        }
        return self.client_config({**producer, **(extra or {})})

    def with_client_id(self, client_id: str) -> KafkaSettings:
        return replace(self, client_id=client_id)

    def rolling_topics(self, *topics: str) -> KafkaSettings:
        """These settings with ``topics`` rolling as generations."""
        return replace(self, rolling=frozenset(topics))

    def describe(self) -> str:
        """``host:port (sasl_ssl SCRAM-SHA-512 user=crawler ca=/etc/ca.pem compression=lz4)``: no
        secrets."""
        parts = [] if self.security == KafkaSecurity() else [self.security.describe()]
        if self.compression != "none":
            parts.append(f"compression={self.compression}")
        return f"{self.bootstrap} ({' '.join(parts)})" if parts else self.bootstrap


def _log_client_error(error: KafkaError) -> None:
    """librdkafka reports connection trouble here and retries by itself; a caller's request
    fails with a translated error if it lasts."""
    log = logger.error if error.fatal() else logger.warning
    log("kafka client: %s: %s", error.name(), error.str())


def _ignore_error(error: KafkaError) -> None:
    return None
