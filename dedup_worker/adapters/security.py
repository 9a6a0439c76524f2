"""Secrets and the security settings shared by every client (Kafka and Redis).

A :class:`Secret` never shows its value: ``repr``, ``str`` and f-strings give ``***``, so a
config object holding one can be logged, described or put in an error message safely; only
the client that needs the value calls :meth:`Secret.reveal`.

Security settings are read through a :data:`Lookup` (a ``NEARDUP_*`` name to its raw value),
so the worker (environment), the crawler (Scrapy settings, then the environment) and the
``neardup`` commands parse them with the same code and get the same errors, each naming the
setting to fix.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit, urlunsplit

from dedup_worker.errors import ConfigError

#: A setting's raw value by its ``NEARDUP_*`` name; None (or "") when it is not set.
Lookup = Callable[[str], str | None]

_HIDDEN = "***"


class Secret:
    """A password or key passphrase: compared and hashed by value, never shown."""

    __slots__ = ("_value",)

    def __init__(self, value: str = "") -> None:
        self._value = value

    def reveal(self) -> str:
        """The value, for the client that sends it; never log or format the result."""
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __repr__(self) -> str:
        return f"Secret({_HIDDEN!r})" if self._value else "Secret('')"

    def __str__(self) -> str:
        return _HIDDEN if self._value else ""

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


#: The unset secret (a shared immutable default).
NO_SECRET = Secret()


def environment(env: Mapping[str, str] | None = None) -> Lookup:
    """A lookup in ``env`` (default: the process environment)."""
    source = os.environ if env is None else env
    return source.get


def text(lookup: Lookup, name: str) -> str:
    return (lookup(name) or "").strip()


def secret(lookup: Lookup, name: str) -> Secret:
    # Passwords keep their spaces: they are part of the value.
    return Secret(lookup(name) or "")


def readable_file(lookup: Lookup, name: str) -> str:
    """A path setting: "" when unset, else a file this process can read (checked now, so a
    typo stops the process at start-up, not at its first connection)."""
    path = text(lookup, name)
    if path and not (os.path.isfile(path) and os.access(path, os.R_OK)):
        raise ConfigError(f"{name} must name a readable file, got {path!r}")
    return path


def choice(lookup: Lookup, name: str, allowed: tuple[str, ...], default: str) -> str:
    """One of ``allowed`` (compared case-insensitively, returned as spelled in ``allowed``)."""
    raw = text(lookup, name)
    if not raw:
        return default
    for value in allowed:
        if raw.lower() == value.lower():
            return value
    raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {raw!r}")


def boolean(lookup: Lookup, name: str, default: bool) -> bool:
    raw = text(lookup, name).lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false (1/0, yes/no, on/off), got {raw!r}")


def redact_url(url: str) -> str:
    """``url`` with the password of its user part replaced by ``***`` (for logs and errors)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:" if parts.username else ":"
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}{_HIDDEN}@{host}"))
