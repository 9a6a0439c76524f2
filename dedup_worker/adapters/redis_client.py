"""redis-py clients for the index, and the translation of redis-py errors at the boundary.

Callers see only ``NeardupError`` subclasses: ``BackendUnavailable`` when retrying later can
help (unreachable, timed out, loading, cluster reconfiguring, busy script), ``BackendError``
when it cannot (wrong type at a key, out of memory, no permission, bad credentials).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import redis
import redis.cluster
import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry

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


def connect(
    url: str,
    *,
    cluster: bool = False,
    socket_timeout: float = 2.0,
    connect_timeout: float = 1.0,
) -> Client:
    """A fail-fast client for ``url``: no hidden retries, callers back off on BackendUnavailable.

    redis-py's default retry turns a short socket timeout into ~10 s of silent retrying.
    """
    options = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "retry": Retry(NoBackoff(), 0),
    }
    try:
        if cluster:
            return redis.cluster.RedisCluster.from_url(url, **options)
        return redis.Redis.from_url(url, **options)
    except rex.RedisError as exc:
        raise translate(exc, url) from exc
    except ValueError as exc:
        raise ConfigError(f"bad redis url {url!r}: {exc}") from exc


def describe(client: Client) -> str:
    """A URL naming the server(s) of ``client``, for error messages."""
    if isinstance(client, redis.cluster.RedisCluster):
        # redis-py leaves RedisCluster.get_nodes unannotated.
        nodes = ",".join(sorted(node.name for node in client.get_nodes()))  # type: ignore[no-untyped-call]
        return f"redis-cluster://{nodes}"
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    host, port = kwargs.get("host", "localhost"), kwargs.get("port", 6379)
    return f"redis://{host}:{port}/{kwargs.get('db', 0)}"


def check_binary(client: Client) -> None:
    """Buckets are binary: a client that decodes responses would corrupt them."""
    if client.get_encoder().decode_responses:
        raise ConfigError("the redis index needs a client with decode_responses=False")


def translate(exc: Exception, url: str) -> NeardupError:
    """The NeardupError for a redis-py error raised while talking to ``url``."""
    if isinstance(exc, _PERMANENT):
        return BackendError(f"redis at {url} refused access: {exc}")
    if isinstance(exc, _TRANSIENT) or _is_transient_reply(exc):
        return BackendUnavailable(f"redis at {url} unavailable: {type(exc).__name__}: {exc}")
    return BackendError(f"redis at {url} failed: {type(exc).__name__}: {exc}")


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
