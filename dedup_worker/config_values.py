"""Parsers of configuration values, shared by every process's config: (raw text, where it
came from) -> the value, or a ``ConfigError`` that names the source and what it accepts.

The worker's options table and the crawler's settings check the same things with the same
words (a Kafka bootstrap list, a Redis URL, a topic name), so a value one process refuses is
refused by the other at start-up too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from dedup_worker.adapters.security import redact_url
from dedup_worker.errors import ConfigError

#: ``redis_url``'s value for "no Redis": the worker keeps its index in memory.
MEMORY_BACKEND = "memory"

_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
# Kafka's own rule for topic names (legal characters, at most 249 of them).
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_REDIS_SCHEMES = ("redis", "rediss", "unix")

Parser = Callable[[str, str], Any]


def integer(low: int, high: int) -> Parser:
    def parse(raw: str, source: str) -> int:
        try:
            value = int(raw.strip().replace("_", ""))
        except ValueError:
            raise ConfigError(f"{source} must be an integer {low}..{high}, got {raw!r}") from None
        if not low <= value <= high:
            raise ConfigError(f"{source} must be an integer {low}..{high}, got {value}")
        return value

    return parse


def number(low: float, high: float) -> Parser:
    def parse(raw: str, source: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ConfigError(f"{source} must be a number {low:g}..{high:g}, got {raw!r}") from None
        if not low <= value <= high:
            raise ConfigError(f"{source} must be a number {low:g}..{high:g}, got {value:g}")
        return value

    return parse


def boolean(raw: str, source: str) -> bool:
    text = raw.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{source} must be true or false (1/0, yes/no, on/off), got {raw!r}")


def choice(*allowed: str, upper: bool = False) -> Parser:
    def parse(raw: str, source: str) -> str:
        value = raw.strip().upper() if upper else raw.strip().lower()
        if value not in allowed:
            raise ConfigError(f"{source} must be one of {', '.join(allowed)}, got {raw!r}")
        return value

    return parse


def power_of_two(low: int, high: int) -> Parser:
    whole = integer(low, high)

    def parse(raw: str, source: str) -> int:
        value: int = whole(raw, source)
        if value & (value - 1):
            raise ConfigError(f"{source} must be a power of two {low}..{high}, got {value}")
        return value

    return parse


def choice_int(*allowed: int) -> Parser:
    def parse(raw: str, source: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            value = -1
        if value not in allowed:
            names = ", ".join(map(str, allowed))
            raise ConfigError(f"{source} must be one of {names}, got {raw!r}")
        return value

    return parse


def bootstrap(raw: str, source: str) -> str:
    servers = [part.strip() for part in raw.split(",")]
    if not all(_valid_host_port(server) for server in servers):
        raise ConfigError(f"{source} must be host:port[,host:port...], got {raw!r}")
    return ",".join(servers)


def _valid_host_port(text: str) -> bool:
    match = _HOST_PORT.match(text)
    return match is not None and 0 < int(match.group(2)) < 65536


def redis_url(raw: str, source: str) -> str:
    value = raw.strip()
    if value == MEMORY_BACKEND:
        return value
    parts = urlsplit(value)
    if parts.scheme not in _REDIS_SCHEMES or not (parts.netloc or parts.path):
        raise ConfigError(
            f"{source} must be 'memory' or a URL like redis://host:6379/0 "
            f"(schemes {', '.join(_REDIS_SCHEMES)}), got {redact_url(raw)!r}"
        )
    return value


def topic(raw: str, source: str) -> str:
    value = raw.strip()
    if not _TOPIC.match(value) or value in (".", ".."):
        raise ConfigError(
            f"{source} must be a Kafka topic name (1-249 of A-Z a-z 0-9 . _ -), got {raw!r}"
        )
    return value


def name(raw: str, source: str) -> str:
    value = raw.strip()
    if not _TOPIC.match(value):
        raise ConfigError(f"{source} must be 1-249 of A-Z a-z 0-9 . _ -, got {raw!r}")
    return value


def dlq(raw: str, source: str) -> str:
    return "" if not raw.strip() else topic(raw, source)
