"""A worker's consumer at close when it never joined its group (the broker out of reach)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from dedup_worker.adapters.kafka import KafkaSettings
from dedup_worker.adapters.kafka.consumer import PageConsumer
from neardup.servers.process import free_port


def test_a_consumer_that_never_joined_does_not_wait_for_an_assignment_at_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its broker out of reach, it sends no leave, so it cannot wedge a Tansu group: the wait
    for a first assignment (taken with a leave turn) would only delay its stop by 10 s."""
    port = free_port("127.0.0.1")  # nothing listens: a real client, no broker
    turns: list[bool] = []

    @contextmanager
    def turn(poll: Callable[[], None]) -> Iterator[None]:
        turns.append(True)
        yield

    consumer = PageConsumer(
        KafkaSettings(f"127.0.0.1:{port}"), "pages", "group",
        fetch_wait_ms=100, max_message_bytes=1 << 20, leave_turn=turn,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING):
        consumer.close()
    assert turns == [True]
    assert "in the middle of a rebalance" not in caplog.text
