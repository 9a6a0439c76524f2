"""The public message contract: page messages in, decisions out, dead letters aside, and the
rule for reading decisions (:mod:`dedup_worker.contract.reading`), and the predicted duplicates
a crawler skipped by URL rule (:mod:`dedup_worker.contract.predictions`)."""

from dedup_worker.contract.messages import (
    DECISION_SCHEMA,
    PAGE_SCHEMA,
    DeadLetter,
    Decision,
    Page,
    Verdict,
    decode_decision,
    decode_page,
)
from dedup_worker.contract.predictions import (
    PREDICTION_SCHEMA,
    PredictedDuplicate,
    RuleEvidence,
    decode_prediction,
)
from dedup_worker.contract.reading import (
    DecisionFold,
    PageKey,
    Standing,
    Step,
    fold_decisions,
    next_step,
    page_key,
)

__all__ = [
    "DECISION_SCHEMA",
    "PAGE_SCHEMA",
    "PREDICTION_SCHEMA",
    "DeadLetter",
    "Decision",
    "DecisionFold",
    "Page",
    "PageKey",
    "PredictedDuplicate",
    "RuleEvidence",
    "Standing",
    "Step",
    "Verdict",
    "decode_decision",
    "decode_page",
    "decode_prediction",
    "fold_decisions",
    "next_step",
    "page_key",
]
