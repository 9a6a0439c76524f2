"""The predicted-duplicates message: round trip, validation, and kept apart from decisions."""

from __future__ import annotations

import orjson
import pytest

from dedup_worker.contract import decode_decision, decode_prediction
from dedup_worker.contract.predictions import (
    PREDICTED_VERDICT,
    PREDICTION_SCHEMA,
    PredictedDuplicate,
    RuleEvidence,
)
from dedup_worker.errors import ContractError

RULE = RuleEvidence("prefix http://m.test/pub http://d.test/docs", "prefix", 14, 15, 0.9333, 0.81)


def prediction() -> PredictedDuplicate:
    return PredictedDuplicate(
        url="http://m.test/pub/a", host="m.test", duplicate_of="http://d.test/docs/a",
        predicted_at=12.5, rules=(RULE,), stage="fetch", source=None, crawl_id="c1",
        evidence={"keeper": "http://d.test/docs/a"},
    )  # fmt: skip


def test_a_prediction_survives_a_round_trip() -> None:
    original = prediction()
    decoded = decode_prediction(original.to_json())
    assert decoded == original
    body = orjson.loads(original.to_json())
    assert body["schema"] == PREDICTION_SCHEMA and body["verdict"] == PREDICTED_VERDICT
    assert decoded.precision == pytest.approx(0.9333)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"rules": []}, "missing_field"),
        ({"rules": [{**RULE.as_dict(), "precision": 1.5}]}, "bad_field"),
        ({"duplicate_of": None}, None),
        ({"schema": "neardup.prediction/2"}, None),
    ],
)
def test_a_bad_prediction_is_refused_with_a_reason(
    change: dict[str, object], reason: str | None
) -> None:
    body = {**orjson.loads(prediction().to_json()), **change}
    with pytest.raises(ContractError) as raised:
        decode_prediction(orjson.dumps(body))
    if reason is not None:
        assert raised.value.reason == reason


def test_a_reader_of_decisions_refuses_a_prediction_it_would_never_see() -> None:
    # Why predictions have their own topic: on `decisions` they would be errors for every
    # consumer written against the decision contract.
    with pytest.raises(ContractError):
        decode_decision(prediction().to_json())


def test_a_lone_surrogate_in_a_rule_is_refused() -> None:
    """orjson refuses the message; the standard library's parser reads it, and every object
    it makes, nested ones too, has its strings checked."""
    body = orjson.loads(prediction().to_json())
    raw = orjson.dumps(body).replace(b'"prefix"', b'"pre\\ud800fix"')
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    with pytest.raises(ContractError) as raised:
        decode_prediction(raw)
    assert raised.value.reason == "invalid_unicode"
