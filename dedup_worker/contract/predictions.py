"""Predicted duplicates: URLs a crawler did not fetch because a learned URL rule maps them onto
a page it already fetched (issue 13). Topic ``decisions.predicted`` (``NEARDUP_PREDICTIONS_TOPIC``),
keyed by the URL's host, like ``decisions``.

A separate topic, not a new verdict on ``decisions``: :func:`~dedup_worker.contract.messages.
decode_decision` rejects an unknown verdict (``bad_field``) and a message of another kind
(``unknown_schema``), so either on ``decisions`` would make every consumer written against the
decision contract count errors. On their own topic the predictions reach only the consumers
that ask for them, and a reader of ``decisions`` sees exactly what it saw before.

A prediction is evidence, not a verdict of the detector: the URL was never fetched, so it has no
fingerprint and no fetch time. It names the page it is predicted to duplicate (``duplicate_of``,
fetched), the rules that mapped it there and their measured precision and support.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import orjson

from dedup_worker.contract.messages import _check_schema, _field, _loads, _number, _optional
from dedup_worker.errors import ContractError

PREDICTION_SCHEMA = "neardup.prediction/1"
PREDICTED_VERDICT = "predicted_duplicate"
#: When the URL was skipped: as a page's outlink was about to be scheduled, or as a request
#: scheduled earlier was about to be fetched (the rule became confident meanwhile).
STAGES = ("schedule", "fetch")


@dataclass(frozen=True, slots=True)
class RuleEvidence:
    """One rule of a prediction, as the crawl's rule store counted it when the URL was skipped.

    ``support``: successful checks (fetched pages the rule mapped onto a page with the same
    content); ``checks``: all checks; ``precision``: support / checks; ``lower_bound``: the
    one-sided 95% Wilson lower bound of the precision, which had to reach the policy's
    activation level before the rule could skip anything."""

    key: str
    kind: str
    support: int
    checks: int
    precision: float
    lower_bound: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "kind": self.kind,
            "support": self.support,
            "checks": self.checks,
            "precision": self.precision,
            "lower_bound": self.lower_bound,
        }


@dataclass(frozen=True, slots=True)
class PredictedDuplicate:
    """One URL skipped by rule (see the module docstring)."""

    url: str
    host: str
    duplicate_of: str
    predicted_at: float
    rules: tuple[RuleEvidence, ...]
    stage: str = "schedule"
    source: str | None = None  # the page whose outlink it was, when known
    crawl_id: str = ""
    verdict: str = PREDICTED_VERDICT
    evidence: dict[str, Any] = field(default_factory=dict)
    schema: str = PREDICTION_SCHEMA

    @property
    def precision(self) -> float:
        """The prediction's precision: that of its weakest rule."""
        return min((rule.precision for rule in self.rules), default=0.0)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "schema": self.schema,
                "url": self.url,
                "host": self.host,
                "verdict": self.verdict,
                "duplicate_of": self.duplicate_of,
                "predicted_at": self.predicted_at,
                "stage": self.stage,
                "source": self.source,
                "crawl_id": self.crawl_id,
                "rules": [rule.as_dict() for rule in self.rules],
                "evidence": self.evidence,
            }
        )


def decode_prediction(raw: bytes) -> PredictedDuplicate:
    """Parse and validate one ``decisions.predicted`` message, or raise ``ContractError``."""
    body = _loads(raw)
    _check_schema(body, PREDICTION_SCHEMA)
    rules = body.get("rules")
    if not isinstance(rules, list) or not rules:
        raise ContractError("missing_field", "'rules' must be a non-empty list")
    evidence = body.get("evidence") or {}
    if not isinstance(evidence, dict):
        raise ContractError("wrong_type", "'evidence' must be an object")
    stage = _optional(body, "stage", str) or "schedule"
    return PredictedDuplicate(
        url=_field(body, "url", str),
        host=_field(body, "host", str),
        duplicate_of=_field(body, "duplicate_of", str),
        predicted_at=_number(body, "predicted_at"),
        rules=tuple(_rule(item) for item in rules),
        stage=stage,
        source=_optional(body, "source", str),
        crawl_id=_optional(body, "crawl_id", str) or "",
        verdict=_optional(body, "verdict", str) or PREDICTED_VERDICT,
        evidence=evidence,
    )


def _rule(item: Any) -> RuleEvidence:
    if not isinstance(item, dict):
        raise ContractError("wrong_type", "each of 'rules' must be an object")
    precision = _number(item, "precision")
    lower_bound = _number(item, "lower_bound")
    if not (0.0 <= precision <= 1.0 and 0.0 <= lower_bound <= 1.0) or math.isnan(precision):
        raise ContractError("bad_field", "a rule's precision and lower_bound must be in [0, 1]")
    return RuleEvidence(
        key=_field(item, "key", str),
        kind=_field(item, "kind", str),
        support=_field(item, "support", int),
        checks=_field(item, "checks", int),
        precision=precision,
        lower_bound=lower_bound,
    )
