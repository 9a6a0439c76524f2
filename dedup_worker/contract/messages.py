"""Page, decision and dead-letter messages: the one source of truth for the wire format.

JSON objects, UTF-8. Topic ``pages`` and ``decisions`` are keyed by the page's host. Both carry a
``schema`` field ``neardup.<kind>/<major>[.<minor>]``; a reader accepts any minor version of the
major it knows (new fields are ignored) and rejects an unknown major with a ``ContractError``:
it never guesses.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

import orjson

from dedup_worker.errors import ContractError

PAGE_SCHEMA = "neardup.page/1"
DECISION_SCHEMA = "neardup.decision/1"
DEAD_LETTER_SCHEMA = "neardup.dead_letter/1"

#: Hard ceiling for the visible text of one page; larger bodies go to the dead-letter topic.
DEFAULT_MAX_TEXT_BYTES = 8 * 1024 * 1024

T = TypeVar("T")


class Verdict(StrEnum):
    UNIQUE = "unique"
    NEAR_DUPLICATE = "near_duplicate"
    EXACT_DUPLICATE = "exact_duplicate"
    UNCHANGED = "unchanged"
    CHANGED = "changed"


# Page and Decision are values: build new ones rather than assigning fields. They are not
# frozen because a frozen dataclass sets each field through object.__setattr__ (~1.2 us more a
# construction, one of each per page on the worker's two threads; README, seventh pass).
@dataclass(slots=True)
class Page:
    """One fetched page, as the crawler publishes it to ``pages``."""

    url: str
    host: str
    fetched_at: float
    text: str
    requested_url: str = ""
    status: int = 200
    content_type: str = "text/html"
    title: str = ""
    outlinks: tuple[str, ...] = ()
    depth: int = 0
    checksum: str | None = None
    schema: str = PAGE_SCHEMA

    def to_json(self) -> bytes:
        return _dumps(
            {
                "schema": self.schema,
                "url": self.url,
                "requested_url": self.requested_url or self.url,
                "host": self.host,
                "fetched_at": self.fetched_at,
                "status": self.status,
                "content_type": self.content_type,
                "title": self.title,
                "text": self.text,
                "outlinks": list(self.outlinks),
                "depth": self.depth,
                "checksum": self.checksum,
            }
        )


@dataclass(slots=True)
class Decision:
    """The worker's verdict on one page, as published to ``decisions``."""

    url: str
    host: str
    verdict: Verdict
    simhash: str
    priority: float
    follow_outlinks: bool
    fetched_at: float
    decided_at: float
    duplicate_of: str | None = None
    distance: int | None = None
    outlinks: tuple[str, ...] = ()
    corrects: bool = False
    evidence: dict[str, Any] = field(default_factory=dict)
    schema: str = DECISION_SCHEMA

    def to_json(self) -> bytes:
        # An explicit dict: dataclasses.asdict deep-copies every outlink (~190 us a decision).
        return _dumps(
            {
                "schema": self.schema,
                "url": self.url,
                "host": self.host,
                "verdict": self.verdict,  # a StrEnum: orjson writes its value
                "simhash": self.simhash,
                "duplicate_of": self.duplicate_of,
                "distance": self.distance,
                "priority": self.priority,
                "follow_outlinks": self.follow_outlinks,
                "outlinks": list(self.outlinks),
                "corrects": self.corrects,
                "fetched_at": self.fetched_at,
                "decided_at": self.decided_at,
                "evidence": self.evidence,
            }
        )


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that could not be processed: the original bytes (base64) and why."""

    reason: str
    detail: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    failed_at: float
    schema: str = DEAD_LETTER_SCHEMA

    def to_json(self) -> bytes:
        import base64

        return _dumps(
            {
                "schema": self.schema,
                "reason": self.reason,
                "detail": self.detail,
                "topic": self.topic,
                "partition": self.partition,
                "offset": self.offset,
                "key_b64": base64.b64encode(self.key).decode() if self.key is not None else None,
                "value_b64": base64.b64encode(self.value).decode(),
                "failed_at": self.failed_at,
            }
        )


def _dumps(body: dict[str, Any]) -> bytes:
    # Compact UTF-8 JSON like json.dumps(ensure_ascii=False, separators=(",", ":")), floats
    # exact (some spelled differently: 1e-7 for 1e-07); about 5x faster (a test pins it).
    return orjson.dumps(body)


def decode_page(raw: bytes, *, max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES) -> Page:
    """Parse and validate one ``pages`` message, or raise ``ContractError`` naming the reason."""
    if len(raw) > max_text_bytes + 1024 * 1024:
        raise ContractError("too_large", f"message is {len(raw)} bytes, limit {max_text_bytes}")
    body = _loads(raw)
    _check_schema(body, PAGE_SCHEMA)
    text = _field(body, "text", str)
    # A JSON string's UTF-8 is never longer than its spelling in the message (escapes only
    # lengthen it), so only a message longer than the limit needs its text encoded to measure.
    if len(raw) > max_text_bytes and len(text.encode("utf-8")) > max_text_bytes:
        raise ContractError("too_large", f"text exceeds {max_text_bytes} bytes")
    if "\x00" in text:
        raise ContractError("binary_body", "text contains NUL bytes; not visible text")
    url = _field(body, "url", str)
    return Page(
        url=url,
        host=_field(body, "host", str),
        fetched_at=_number(body, "fetched_at"),
        text=text,
        requested_url=_optional(body, "requested_url", str) or url,
        status=_optional(body, "status", int) or 200,
        content_type=_optional(body, "content_type", str) or "text/html",
        title=_optional(body, "title", str) or "",
        outlinks=tuple(_string_list(body, "outlinks")),
        depth=_optional(body, "depth", int) or 0,
        checksum=_optional(body, "checksum", str),
        schema=PAGE_SCHEMA,
    )


def decode_decision(raw: bytes) -> Decision:
    """Parse and validate one ``decisions`` message (used by the crawler and by tools)."""
    body = _loads(raw)
    _check_schema(body, DECISION_SCHEMA)
    verdict_name = _field(body, "verdict", str)
    try:
        verdict = Verdict(verdict_name)
    except ValueError:
        raise ContractError("bad_field", f"unknown verdict {verdict_name!r}") from None
    evidence = body.get("evidence") or {}
    if not isinstance(evidence, dict):
        raise ContractError("wrong_type", "'evidence' must be an object")
    return Decision(
        url=_field(body, "url", str),
        host=_field(body, "host", str),
        verdict=verdict,
        simhash=_field(body, "simhash", str),
        priority=_number(body, "priority"),
        follow_outlinks=_field(body, "follow_outlinks", bool),
        fetched_at=_number(body, "fetched_at"),
        decided_at=_number(body, "decided_at"),
        duplicate_of=_optional(body, "duplicate_of", str),
        distance=_optional(body, "distance", int),
        outlinks=tuple(_string_list(body, "outlinks")),
        corrects=bool(_optional(body, "corrects", bool)),
        evidence=evidence,
    )


class _Unverified(dict[str, Any]):
    """An object parsed by the standard library's decoder, whose strings may hold lone
    surrogates (spelled ``\\ud800``): the fields read from it are checked one by one. A body
    orjson parsed needs no check (orjson refuses lone surrogates), which saves encoding every
    page's text once more."""


def _loads(raw: bytes) -> dict[str, Any]:
    try:  # fast path: orjson accepts only valid UTF-8 without lone surrogates, depth <= 1024
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = _loads_strict(raw)  # names the precise reason (or accepts what only it reads)
    if not isinstance(body, dict):
        raise ContractError("wrong_type", f"message is a JSON {type(body).__name__}, not object")
    return body


def _loads_strict(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError("invalid_utf8", f"message is not UTF-8 ({exc.reason})") from None
    try:
        body = json.loads(text, object_hook=_Unverified)
    except json.JSONDecodeError as exc:
        raise ContractError("malformed_json", f"{exc.msg} at char {exc.pos}") from None
    except RecursionError:
        raise ContractError("malformed_json", "nesting too deep") from None
    return body


def _check_schema(body: dict[str, Any], expected: str) -> None:
    schema = body.get("schema")
    if schema == expected:
        return  # nearly every message: no parsing of the two names
    if not isinstance(schema, str) or "/" not in schema:
        raise ContractError("missing_schema", f"'schema' must look like {expected!r}")
    kind, _, version = schema.partition("/")
    want_kind, _, want_version = expected.partition("/")
    if kind != want_kind:
        raise ContractError("unknown_schema", f"schema {schema!r} is not a {want_kind} message")
    if version.split(".")[0] != want_version:
        raise ContractError(
            "unknown_schema_version",
            f"schema {schema!r}: this reader knows major version {want_version} only",
        )


def _field(body: dict[str, Any], name: str, kind: type[T]) -> T:
    value = body.get(name)
    if type(value) is kind and type(body) is dict:
        return value  # see _optional
    if value is None:
        raise ContractError("missing_field", f"required field {name!r} is missing")
    return _typed(value, name, kind, isinstance(body, _Unverified))


def _optional(body: dict[str, Any], name: str, kind: type[T]) -> T | None:
    value = body.get(name)
    if value is None or (type(value) is kind and type(body) is dict):
        # The common case, ~0.3 us less a field (nine a page): exactly the type (so not a bool
        # for an int), in a body orjson parsed (whose strings hold no lone surrogate).
        return value
    return _typed(value, name, kind, isinstance(body, _Unverified))


def _typed(value: Any, name: str, kind: type[T], unverified: bool) -> T:
    # bool is an int in Python; a status of `true` is still a wrong type on the wire.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ContractError(
            "wrong_type", f"field {name!r} must be {kind.__name__}, got {type(value).__name__}"
        )
    typed: T = value
    if unverified and isinstance(value, str):
        _check_unicode(value, name)
    return typed


def _check_unicode(value: str, name: str) -> None:
    """JSON may spell lone surrogates (\\ud800) that no UTF-8 text can hold: reject them here
    rather than crash the engine or the encoder later."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ContractError(
            "invalid_unicode", f"field {name!r} holds a lone surrogate at {exc.start}"
        ) from None


def _number(body: dict[str, Any], name: str) -> float:
    value = body.get(name)
    if value is None:
        raise ContractError("missing_field", f"required field {name!r} is missing")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ContractError("wrong_type", f"field {name!r} must be a finite number")
    return float(value)


def _string_list(body: dict[str, Any], name: str) -> list[str]:
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ContractError("wrong_type", f"field {name!r} must be a list of strings")
    if isinstance(body, _Unverified):
        for item in value:
            _check_unicode(item, name)
    return value
