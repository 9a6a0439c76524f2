"""redis-py clients for the index, the page records and the crawler's seen store, their
security settings, and the translation of redis-py errors at the boundary.

Callers see only ``NeardupError`` subclasses: ``BackendUnavailable`` when retrying later can
help (unreachable, timed out, loading, cluster reconfiguring, busy script), ``ConfigError``
when the server refuses our credentials or TLS setup (the message names the settings), and
``BackendError`` for anything else retrying will not fix (wrong type at a key, out of memory,
a command the ACL user may not run).

A password may also come in the URL (``redis://user:password@host``); URLs are shown
redacted everywhere (:func:`~dedup_worker.adapters.security.redact_url`).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
import redis.cluster
import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry

from dedup_worker.adapters import security
from dedup_worker.adapters.security import NO_SECRET, Lookup, Secret, redact_url
from dedup_worker.errors import BackendUnavailable, ConfigError, NeardupError

logger = logging.getLogger(__name__)

Client = redis.Redis | redis.cluster.RedisCluster

#: Error replies that mean "not now" rather than "never" (redis-py maps some to ResponseError).
_TRANSIENT_REPLIES = ("BUSY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY")
_PERMANENT = (rex.AuthenticationError, rex.AuthorizationError, rex.NoPermissionError)
_TRANSIENT = (
    rex.ConnectionError,
    rex.TimeoutError,
    rex.ClusterError,
    rex.TryAgainError,
    rex.ReadOnlyError,
    rex.SlotNotCoveredError,
)
#: redis-py raises RedisClusterException for misuse too; these messages mean "unreachable".
_UNREACHABLE_CLUSTER = ("cannot be connected", "not covered", "no redis_connection")


class BackendError(NeardupError):
    """Redis answered with an error that retrying will not fix; the message says which."""


USERNAME = "NEARDUP_REDIS_USERNAME"
PASSWORD = "NEARDUP_REDIS_PASSWORD"
CA_FILE = "NEARDUP_REDIS_TLS_CA_FILE"
CERT_FILE = "NEARDUP_REDIS_TLS_CERT_FILE"
KEY_FILE = "NEARDUP_REDIS_TLS_KEY_FILE"
KEY_PASSWORD = "NEARDUP_REDIS_TLS_KEY_PASSWORD"
CHECK_HOSTNAME = "NEARDUP_REDIS_TLS_CHECK_HOSTNAME"
#: Every Redis security setting, in the order the README documents them.
SECURITY_SETTINGS = (
    USERNAME, PASSWORD, CA_FILE, CERT_FILE, KEY_FILE, KEY_PASSWORD, CHECK_HOSTNAME,
)  # fmt: skip


@dataclass(frozen=True)
class RedisSecurity:
    """Credentials (``requirepass`` or an ACL user) and TLS of the Redis clients. TLS is on
    with a ``rediss://`` URL; these settings say which CA to trust and which client
    certificate to show. Values given here win over those of the URL."""

    username: str = ""
    password: Secret = NO_SECRET
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_key_password: Secret = NO_SECRET
    tls_check_hostname: bool = True

    @classmethod
    def from_settings(cls, lookup: Lookup) -> RedisSecurity:
        found = cls(
            username=security.text(lookup, USERNAME),
            password=security.secret(lookup, PASSWORD),
            tls_ca_file=security.readable_file(lookup, CA_FILE),
            tls_cert_file=security.readable_file(lookup, CERT_FILE),
            tls_key_file=security.readable_file(lookup, KEY_FILE),
            tls_key_password=security.secret(lookup, KEY_PASSWORD),
            tls_check_hostname=security.boolean(lookup, CHECK_HOSTNAME, True),
        )
        if bool(found.tls_cert_file) != bool(found.tls_key_file):
            raise ConfigError(f"a client certificate needs both {CERT_FILE} and {KEY_FILE}")
        if found.username and not found.password:
            raise ConfigError(f"{USERNAME} is set: {PASSWORD} must be set too")
        return found

    @property
    def tls_files(self) -> bool:
        return bool(self.tls_ca_file or self.tls_cert_file or self.tls_key_password)

    def check_url(self, url: str) -> None:
        """TLS settings with a URL that does not use TLS would be ignored: refuse them."""
        if self.tls_files and not url.startswith("rediss://"):
            raise ConfigError(
                f"{CA_FILE}/{CERT_FILE}/{KEY_PASSWORD} set, but the Redis URL {redact_url(url)} "
                "does not use TLS: use rediss://host:port/db"
            )

    def client_options(self, url: str) -> dict[str, Any]:
        """redis-py keyword arguments for these settings (the only place secrets are
        revealed); TLS options only for a ``rediss://`` URL."""
        options: dict[str, Any] = {}
        if self.username:
            options["username"] = self.username
        if self.password:
            options["password"] = self.password.reveal()
        if url.startswith("rediss://"):
            options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
            options["ssl_check_hostname"] = self.tls_check_hostname
            files = {
                "ssl_ca_certs": self.tls_ca_file,
                "ssl_certfile": self.tls_cert_file,
                "ssl_keyfile": self.tls_key_file,
                "ssl_password": self.tls_key_password.reveal(),
            }
            options.update({key: value for key, value in files.items() if value})
        return options

    def describe(self) -> str:
        """For logs: the user and the files; never the password."""
        parts = [f"user={self.username}"] if self.username else []
        if self.password:
            parts.append("password set")
        if self.tls_ca_file:
            parts.append(f"ca={self.tls_ca_file}")
        if self.tls_cert_file:
            parts.append(f"cert={self.tls_cert_file}")
        return " ".join(parts)


def connect(
    url: str,
    *,
    cluster: bool = False,
    socket_timeout: float = 2.0,
    connect_timeout: float = 1.0,
    secured: RedisSecurity | None = None,
    fail_fast: bool = True,
) -> Client:
    """A client for ``url`` with the credentials and TLS of ``secured``.

    ``fail_fast`` (the worker's): short timeouts and no hidden retries, callers back off on
    BackendUnavailable (redis-py's default retry turns a short socket timeout into ~10 s of
    silent retrying). Without it, redis-py's own timeouts and retries (the crawler's seen
    store, whose calls are few and must not fail on a blip).
    """
    secured = secured or RedisSecurity()
    secured.check_url(url)
    options: dict[str, Any] = secured.client_options(url)
    if fail_fast:
        options.update(
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=Retry(NoBackoff(), 0),
        )
    try:
        if cluster:
            return redis.cluster.RedisCluster.from_url(url, **options)
        return redis.Redis.from_url(url, **options)
    except rex.RedisError as exc:
        raise translate(exc, redact_url(url)) from exc
    except ValueError as exc:
        raise ConfigError(f"bad redis url {redact_url(url)!r}: {exc}") from exc


def describe(client: Client) -> str:
    """A URL naming the server(s) of ``client``, for error messages."""
    if isinstance(client, redis.cluster.RedisCluster):
        # redis-py leaves RedisCluster.get_nodes unannotated.
        nodes = ",".join(sorted(node.name for node in client.get_nodes()))  # type: ignore[no-untyped-call]
        return f"redis-cluster://{nodes}"
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    host, port = kwargs.get("host", "localhost"), kwargs.get("port", 6379)
    scheme = "rediss" if issubclass(pool.connection_class, redis.SSLConnection) else "redis"
    return f"{scheme}://{host}:{port}/{kwargs.get('db', 0)}"


def check_binary(client: Client) -> None:
    """Buckets are binary: a client that decodes responses would corrupt them."""
    if client.get_encoder().decode_responses:
        raise ConfigError("the redis index needs a client with decode_responses=False")


def translate(exc: Exception, url: str) -> NeardupError:
    """The NeardupError for a redis-py error raised while talking to ``url`` (redacted)."""
    if isinstance(exc, rex.AuthenticationError):
        return ConfigError(
            f"redis at {url} refused our credentials ({str(exc).rstrip('.')}): check "
            f"{USERNAME} and {PASSWORD} (or the user and password of the URL)"
        )
    if isinstance(exc, _PERMANENT):
        return BackendError(
            f"redis at {url} refused access: {exc} (does the ACL user of {USERNAME} "
            "have the commands and keys it needs?)"
        )
    if isinstance(exc, rex.ConnectionError) and _tls_failure(exc):
        return ConfigError(
            f"TLS with redis at {url} failed: {str(exc).rstrip('.')}. Check {CA_FILE} (the CA "
            f"that signed the server's certificate), {CHECK_HOSTNAME}, and "
            f"{CERT_FILE}/{KEY_FILE} if the server requires a client certificate"
        )
    if isinstance(exc, _TRANSIENT) or _is_transient_reply(exc):
        return BackendUnavailable(f"redis at {url} unavailable: {type(exc).__name__}: {exc}")
    return BackendError(f"redis at {url} failed: {type(exc).__name__}: {exc}")


def _tls_failure(exc: BaseException) -> bool:
    """redis-py wraps a failed TLS handshake in a ConnectionError; the cause is an SSLError."""
    seen: BaseException | None = exc
    for _ in range(8):  # the chain is short; the bound guards against a cycle
        if seen is None:
            break
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "SSL" in str(exc) and "certificate" in str(exc)


def _is_transient_reply(exc: Exception) -> bool:
    if isinstance(exc, rex.RedisClusterException):
        return any(text in str(exc) for text in _UNREACHABLE_CLUSTER)
    return isinstance(exc, rex.ResponseError) and str(exc).startswith(_TRANSIENT_REPLIES)


@contextmanager
def translated(url: str) -> Iterator[None]:
    """Re-raise redis-py errors (and their per-command results) as NeardupErrors."""
    try:
        yield
    except (rex.RedisError, rex.RedisClusterException) as exc:
        error = translate(exc, url)
        logger.debug("%s", error)
        raise error from exc
