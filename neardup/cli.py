"""``neardup``: the umbrella command line.

This package is the composition root: it may import both ``dedup_worker`` and ``crawler``
(which never import each other the wrong way). Subcommands import what they need lazily, so
``neardup pairs`` does not pay for Scrapy or Kafka imports.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Callable, Sequence

from neardup.commands import batch as batch_commands
from neardup.commands import crawl as crawl_commands
from neardup.commands import demo as demo_commands
from neardup.commands import evaluate as evaluate_commands
from neardup.commands import report as report_commands
from neardup.commands import stack as stack_commands
from neardup.errors import MissingExtra

logger = logging.getLogger(__name__)

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neardup",
        description="Streaming near-duplicate detection inside a web crawl.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    crawl_commands.register(commands)
    demo_commands.register(commands)
    batch_commands.register(commands)
    evaluate_commands.register(commands)
    stack_commands.register(commands)
    report_commands.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    worker = _worker_arguments(given)
    if worker is not None:  # every argument is the worker's, flags and --help included
        return crawl_commands.run_worker(argparse.Namespace(worker_args=worker))
    parser = build_parser()
    args = parser.parse_args(given)
    _configure_logging(args.verbose)
    handler: Handler = args.handler
    try:
        return handler(args)
    except MissingExtra as exc:  # an optional part of the install is absent: say which
        print(f"neardup {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0  # output piped into `head` and friends
    except KeyboardInterrupt:
        return 130


def _worker_arguments(argv: list[str]) -> list[str] | None:
    """The arguments after ``worker`` (past any ``-v``), or None for another command.
    argparse's REMAINDER does not take arguments that look like options, so ``neardup worker
    --k 5`` (and ``--help``) reached the umbrella parser and failed."""
    at = 0
    while at < len(argv) and (argv[at] == "--verbose" or re.fullmatch(r"-v+", argv[at])):
        at += 1
    return argv[at + 1 :] if argv[at : at + 1] == ["worker"] else None


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING - 10 * min(verbosity, 2)
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


if __name__ == "__main__":
    sys.exit(main())
