"""Intake: consumed records become a batch of pages, and bad ones dead letters with a reason."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from dedup_worker.adapters.kafka import Record
from dedup_worker.contract.messages import DeadLetter, decode_page
from dedup_worker.errors import ContractError
from dedup_worker.worker.batching import Batch
from dedup_worker.worker.config import WorkerConfig

logger = logging.getLogger(__name__)

#: Space kept in a dead letter for everything but the original bytes (reason, base64 growth).
_DLQ_OVERHEAD = 64 * 1024


class Intake:
    """Decodes records against the page contract; never raises for bad input."""

    def __init__(self, config: WorkerConfig, clock: Callable[[], float]) -> None:
        self.config = config
        self.clock = clock

    def decode(self, records: list[Record]) -> Batch:
        """The batch of these records: their pages, and a dead letter for each bad one."""
        batch = Batch(records, [], [], [])
        for record in records:
            raw = record.value if record.value is not None else b""  # a tombstone is bad input
            try:
                page = decode_page(raw, max_text_bytes=self.config.max_text_bytes)
            except ContractError as exc:
                batch.dead.append(self.dead_letter(record, exc))
            except RecursionError:  # json.loads on thousands of nested brackets
                error = ContractError("malformed_json", "JSON nested too deeply")
                batch.dead.append(self.dead_letter(record, error))
            else:
                batch.pages.append(page)
                batch.page_records.append(record)
        return batch

    def dead_letter(self, record: Record, exc: ContractError) -> DeadLetter:
        """The dead letter of a record (its reason logged with where it was)."""
        value: bytes = record.value if record.value is not None else b""
        detail = exc.detail
        # Base64 grows the original by 4/3: a body that cannot fit in one message is cut, and
        # the detail says so (the alternative, a DLQ record Kafka refuses, would stop the worker).
        room = (self.config.max_message_bytes - _DLQ_OVERHEAD) * 3 // 4
        if len(value) > room:
            detail += f" (original value of {len(value)} bytes truncated to {room} in the DLQ)"
            value = value[:room]
        logger.warning(
            "dead letter %s[%d]@%d: %s: %s",
            record.topic,
            record.partition,
            record.offset,
            exc.reason,
            exc.detail,
            extra=record_fields(record, reason=exc.reason),
        )
        return DeadLetter(
            reason=exc.reason,
            detail=detail,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=value,
            failed_at=self.clock(),
        )


def record_fields(record: Record, **more: Any) -> dict[str, Any]:
    """Structured-log fields naming a record (picked up by the JSON formatter)."""
    return {"topic": record.topic, "partition": record.partition, "offset": record.offset, **more}
