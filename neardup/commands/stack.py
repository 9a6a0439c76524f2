"""``neardup up`` (the embedded broker + Redis) and ``neardup decisions`` (tail the verdicts)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path(".neardup")


def register(commands: Any) -> None:
    up = commands.add_parser(
        "up",
        help="start a local Kafka-protocol broker and Redis on free loopback ports",
        description=(
            "Start the embedded stack (Tansu broker with in-memory storage, redis-server), "
            "print their addresses as environment variables, and stop both on Ctrl-C."
        ),
    )
    up.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="logs and data")
    up.add_argument("--kafka-port", type=int, default=None, help="broker port (default: free)")
    up.add_argument("--redis-port", type=int, default=None, help="Redis port (default: free)")
    up.set_defaults(handler=run_up)

    tail = commands.add_parser("decisions", help="tail the decisions topic in a readable form")
    tail.add_argument("--bootstrap", default=os.environ.get("NEARDUP_KAFKA_BOOTSTRAP"))
    tail.add_argument("--topic", default=os.environ.get("NEARDUP_DECISIONS_TOPIC", "decisions"))
    tail.add_argument("--json", action="store_true", help="print the raw JSON objects")
    tail.add_argument("--from-beginning", action="store_true", help="start at the oldest")
    tail.add_argument("--max", type=int, default=0, help="stop after this many (0 = never)")
    tail.add_argument("--idle-timeout", type=float, default=0.0, help="stop when idle this long")
    tail.set_defaults(handler=run_decisions)


def run_up(args: argparse.Namespace) -> int:
    from neardup.errors import StackError
    from neardup.stack import EmbeddedStack

    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stack = EmbeddedStack(
            args.state_dir, kafka_port=args.kafka_port, redis_port=args.redis_port,
            handle_sigterm=False,
        ).start()  # fmt: skip
    except StackError as exc:
        print(f"neardup up: {exc}", file=sys.stderr)
        return 1
    with stack:
        print(f"export NEARDUP_KAFKA_BOOTSTRAP={stack.bootstrap}")
        print(f"export NEARDUP_REDIS_URL={stack.redis_url}")
        print(f"# logs in {args.state_dir.resolve()}; Ctrl-C stops both servers", flush=True)
        stop.wait()
    print("# stopped", file=sys.stderr)
    return 0


def run_decisions(args: argparse.Namespace) -> int:
    if not args.bootstrap:
        print(
            "neardup decisions: set NEARDUP_KAFKA_BOOTSTRAP or pass --bootstrap host:port",
            file=sys.stderr,
        )
        return 2
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap.split(","),
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        enable_auto_commit=False,
        group_id=None,
        consumer_timeout_ms=int(args.idle_timeout * 1000) if args.idle_timeout else float("inf"),
    )
    shown = 0
    try:
        for record in consumer:
            print(record.value.decode("utf-8", "replace") if args.json else render(record.value))
            shown += 1
            if args.max and shown >= args.max:
                break
    finally:
        consumer.close()
    return 0


def render(raw: bytes) -> str:
    """One line per decision: verdict, priority, URL, and what it duplicates."""
    from dedup_worker.contract.messages import decode_decision
    from dedup_worker.errors import ContractError

    try:
        decision = decode_decision(raw)
    except ContractError as exc:
        return f"!! undecodable decision ({exc}): {raw[:120]!r}"
    line = f"{decision.verdict.value:<15} p={decision.priority:.2f} {decision.url}"
    if decision.duplicate_of:
        line += f"  ~ {decision.duplicate_of} (d={decision.distance})"
    if decision.corrects:
        line += "  [correction]"
    if decision.follow_outlinks:
        line += f"  +{len(decision.outlinks)} links"
    return line
