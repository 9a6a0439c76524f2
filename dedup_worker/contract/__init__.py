"""The public message contract: page messages in, decisions out, dead letters aside."""

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

__all__ = [
    "DECISION_SCHEMA",
    "PAGE_SCHEMA",
    "DeadLetter",
    "Decision",
    "Page",
    "Verdict",
    "decode_decision",
    "decode_page",
]
