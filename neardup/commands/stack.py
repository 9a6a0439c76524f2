"""``neardup up`` (the embedded broker + Redis) and ``neardup decisions`` (tail the verdicts)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dedup_worker.adapters.kafka import TopicReader

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
    with stack, _rolling(stack.bootstrap):
        print(f"export NEARDUP_KAFKA_BOOTSTRAP={stack.bootstrap}")
        print(f"export NEARDUP_REDIS_URL={stack.redis_url}")
        # The broker never frees a record: pages and decisions roll as generations (README).
        print("export NEARDUP_TOPIC_GENERATIONS=on")
        print(f"# logs in {args.state_dir.resolve()}; Ctrl-C stops both servers", flush=True)
        stop.wait()
    print("# stopped", file=sys.stderr)
    return 0


@contextlib.contextmanager
def _rolling(bootstrap: str) -> Iterator[None]:
    """Roll the stack's topic generations (the settings of this environment: topic names,
    NEARDUP_PARTITIONS, NEARDUP_GENERATION_RECORDS) while the stack runs."""
    from dedup_worker.adapters.kafka import RollerThread
    from dedup_worker.worker.config import load_config
    from neardup.crawl_run import generation_roller

    env = {**os.environ, "NEARDUP_KAFKA_BOOTSTRAP": bootstrap, "NEARDUP_TOPIC_GENERATIONS": "on"}
    config = load_config([], env)
    roller = RollerThread(generation_roller(config, config.partitions))
    roller.start()
    try:
        yield
    finally:
        roller.stop()


def run_decisions(args: argparse.Namespace) -> int:
    if not args.bootstrap:
        print(
            "neardup decisions: set NEARDUP_KAFKA_BOOTSTRAP or pass --bootstrap host:port",
            file=sys.stderr,
        )
        return 2
    from dedup_worker.adapters.kafka import KafkaSecurity, KafkaSettings, TopicReader, check_access
    from dedup_worker.adapters.security import environment
    from dedup_worker.errors import ConfigError, NeardupError

    try:
        security = KafkaSecurity.from_settings(environment())
        kafka = KafkaSettings(args.bootstrap, "neardup-decisions", security)
        if os.environ.get("NEARDUP_TOPIC_GENERATIONS", "").lower() in ("1", "true", "yes", "on"):
            kafka = kafka.rolling_topics(args.topic)  # the stack's topics roll (neardup up)
        check_access(kafka)
        reader = TopicReader(kafka, args.topic)
    except NeardupError as exc:
        print(f"neardup decisions: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    try:
        reader.start("beginning" if args.from_beginning else "end")
        _tail(reader, args)
    except NeardupError as exc:
        print(f"neardup decisions: {exc}", file=sys.stderr)
        return 1
    finally:
        reader.close()
    return 0


def _tail(reader: TopicReader, args: argparse.Namespace) -> None:
    """Print decisions until ``--max`` were shown or none came for ``--idle-timeout``."""
    shown, idle_since = 0, time.monotonic()
    while not args.idle_timeout or time.monotonic() - idle_since < args.idle_timeout:
        records = reader.poll(0.2, max_records=args.max - shown if args.max else 1000)
        if records:
            idle_since = time.monotonic()
        for record in records:
            raw = record.value or b""
            print(raw.decode("utf-8", "replace") if args.json else render(raw), flush=True)
            shown += 1
            if args.max and shown >= args.max:
                return


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
