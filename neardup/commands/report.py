"""``neardup report``: an HTML crawl report with plots from a decisions file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(commands: Any) -> None:
    report = commands.add_parser(
        "report", help="write an HTML report (verdicts, distances, hosts, bandwidth saved)"
    )
    report.add_argument("decisions", type=Path, help="decisions JSONL (neardup crawl --out)")
    report.add_argument("-o", "--out", type=Path, default=Path("report.html"))
    report.add_argument(
        "--page-bytes", type=int, default=50_000, help="assumed bytes per page not fetched"
    )
    report.add_argument(
        "--rules",
        type=Path,
        default=None,
        help="the crawl's URL rules (default: DECISIONS.rules.json beside it, if present)",
    )
    report.set_defaults(handler=run_report)


def run_report(args: argparse.Namespace) -> int:
    from neardup.report import write_report
    from neardup.rules_table import RulesFileError, read_rules, rules_path

    if not args.decisions.is_file():
        print(f"neardup report: no such file: {args.decisions}", file=sys.stderr)
        return 2
    path = args.rules if args.rules is not None else rules_path(args.decisions)
    rules = []
    if args.rules is not None or path.is_file():
        try:
            rules = read_rules(path)
        except RulesFileError as exc:
            print(f"neardup report: {exc}", file=sys.stderr)
            return 2
    summary = write_report(args.decisions, args.out, args.page_bytes, rules)
    print(
        f"{args.out}: {len(summary.final):,} pages, {len(summary.suppressed):,} duplicates, "
        f"{len(rules):,} URL rules"
    )
    return 0
