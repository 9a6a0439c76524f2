"""The JSON log format carries the structured fields (partition, offset...) of a record."""

from __future__ import annotations

import json
import logging

from dedup_worker.worker.batching import Backoff
from dedup_worker.worker.main import JsonFormatter


def test_json_lines_carry_the_structured_extras() -> None:
    record = logging.LogRecord("dedup_worker.worker.service", logging.WARNING, "x.py", 1,
                               "dead letter %s[%d]@%d", ("pages", 3, 77), None)  # fmt: skip
    record.__dict__.update(topic="pages", partition=3, offset=77, reason="malformed_json")
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "dead letter pages[3]@77"
    assert (line["partition"], line["offset"], line["reason"]) == (3, 77, "malformed_json")
    assert line["level"] == "WARNING" and line["logger"] == "dedup_worker.worker.service"


def test_backoff_doubles_up_to_its_cap_and_resets() -> None:
    backoff = Backoff(cap_s=1.0, initial_s=0.1)
    delays = [backoff.next_delay() for _ in range(6)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.next_delay() == 0.1
