"""The start-up check of every process: can this client reach the broker, and does the broker
accept its TLS setup and credentials?

librdkafka retries a refused login or a failed TLS handshake forever (reporting it only to
the error callback), so without this check a wrong password would look like a broker that is
down: the worker would wait for it with backoff. The check turns a refusal into a
``ConfigError`` that names the settings to fix, at start-up.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from dedup_worker.adapters.kafka.errors import kafka_errors, translate
from dedup_worker.adapters.kafka.settings import (
    CA_FILE,
    CERT_FILE,
    CHECK_HOSTNAME,
    KEY_FILE,
    MECHANISM,
    PASSWORD,
    PROTOCOL,
    REQUEST_TIMEOUT_S,
    USERNAME,
    KafkaSettings,
)
from dedup_worker.errors import ConfigError

logger = logging.getLogger(__name__)

_REFUSALS = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.UNSUPPORTED_SASL_MECHANISM,
        KafkaError.ILLEGAL_SASL_STATE,
        KafkaError._SSL,
    }
)


def check_access(settings: KafkaSettings, timeout: float = REQUEST_TIMEOUT_S) -> str | None:
    """Fetch the broker's metadata once; the cluster's id. ``ConfigError`` (naming the
    settings) when the broker refuses the credentials or the TLS handshake fails;
    ``BackendUnavailable`` when it cannot be reached within ``timeout`` seconds (callers retry
    that)."""
    errors: list[KafkaError] = []
    with kafka_errors("configuring the Kafka client"):
        admin = AdminClient(settings.client_config({"error_cb": errors.append}))
    deadline = time.monotonic() + timeout
    while True:
        try:
            cluster_id: str | None = admin.list_topics(timeout=1.0).cluster_id
            return cluster_id
        except KafkaException as exc:
            failure = exc
        admin.poll(0)  # runs the error callback
        refused = [e for e in errors if e.code() in _REFUSALS]
        if refused:
            raise ConfigError(_refusal(settings, refused[-1]))
        if time.monotonic() >= deadline:
            last = f" (last client error: {errors[-1].str()})" if errors else ""
            raise translate(failure, f"connecting to Kafka at {settings.bootstrap}{last}")


def _refusal(settings: KafkaSettings, error: KafkaError) -> str:
    where = f"Kafka at {settings.bootstrap}"
    security = settings.security
    if error.code() == KafkaError._SSL:
        return (
            f"TLS with {where} failed: {error.str()}. Check {CA_FILE} (the CA that signed the "
            f"broker's certificate), {CHECK_HOSTNAME}, and {CERT_FILE}/{KEY_FILE} if the "
            "broker requires a client certificate"
        )
    if not security.sasl:
        return (
            f"{where} requires authentication ({error.str()}): set {PROTOCOL} to sasl_ssl "
            f"(or sasl_plaintext), {MECHANISM}, {USERNAME} and {PASSWORD}"
        )
    return (
        f"{where} refused the SASL {security.sasl_mechanism} login of user "
        f"{security.sasl_username!r} ({error.str()}): check {USERNAME}, {PASSWORD} and "
        f"{MECHANISM} (the mechanisms the broker enables)"
    )
