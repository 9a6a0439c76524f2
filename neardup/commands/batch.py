"""Offline subcommands on fingerprint files: ``pairs``, ``plan``, ``fingerprint``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

logger = logging.getLogger(__name__)


def register(commands: Any) -> None:
    """Add the batch subcommands to the umbrella parser."""
    pairs = commands.add_parser(
        "pairs",
        help="all pairs within Hamming distance k in a file of fingerprints",
        description=(
            "Read one fingerprint per line (16 hex digits) and print every pair within "
            "distance k as 'i j distance' (0-based line numbers, i < j), sorted."
        ),
    )
    pairs.add_argument("file", type=Path, help="fingerprint file ('-' for standard input)")
    pairs.add_argument("-k", type=int, default=3, help="maximum Hamming distance (default 3)")
    pairs.add_argument(
        "--clusters", action="store_true", help="print 'line cluster' instead of pairs"
    )
    pairs.set_defaults(handler=run_pairs)

    planner = commands.add_parser(
        "plan", help="choose and explain a permuted-table design (Manku et al. 3.1.2)"
    )
    planner.add_argument("-n", type=float, required=True, help="expected number of fingerprints")
    planner.add_argument("-k", type=int, default=3, help="maximum Hamming distance (default 3)")
    planner.add_argument(
        "--radius",
        type=int,
        help="search radius beyond k: also report the share of pairs found at each distance",
    )
    planner.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="repeat the tables over this many orders of the bits (finds more beyond k)",
    )
    planner.add_argument("--max-candidates", type=float, help="bound on candidates per probe")
    planner.add_argument("--max-bytes", type=float, help="bound on index bytes per fingerprint")
    planner.set_defaults(handler=run_plan)

    fingerprint = commands.add_parser(
        "fingerprint", help="simhash every line of a text file (one document per line)"
    )
    fingerprint.add_argument("file", type=Path, help="text file ('-' for standard input)")
    fingerprint.add_argument("--shingle", type=int, default=None, help="words per feature")
    fingerprint.set_defaults(handler=run_fingerprint)


def run_pairs(args: argparse.Namespace) -> int:
    from dedup_worker.core.batch import all_pairs, clusters

    if not 0 <= args.k <= 16:
        return _fail(f"-k must be between 0 and 16, got {args.k}")
    try:
        fps = read_fingerprints(args.file)
    except (OSError, ValueError) as exc:
        return _fail(str(exc))
    left, right, dist = all_pairs(fps, args.k)
    if args.clusters:
        labels = clusters(fps.size, left, right)
        _write_columns(sys.stdout, np.arange(fps.size), labels)
    else:
        _write_columns(sys.stdout, left, right, dist)
    logger.info("%d fingerprints, %d pairs within k=%d", fps.size, left.size, args.k)
    return 0


def run_plan(args: argparse.Namespace) -> int:
    from dedup_worker.core.planner import plan
    from dedup_worker.errors import ConfigError

    try:
        chosen = plan(
            int(args.n), args.k, args.max_candidates, args.max_bytes, args.radius, args.replicas
        )
    except ConfigError as exc:
        return _fail(str(exc))
    print(chosen.explain())
    return 0


def run_fingerprint(args: argparse.Namespace) -> int:
    from dedup_worker.core.simhash import FeatureConfig, Fingerprinter

    config = FeatureConfig() if args.shingle is None else FeatureConfig(shingle=args.shingle)
    source = sys.stdin if str(args.file) == "-" else args.file.open(encoding="utf-8")
    with source:
        texts = [line.rstrip("\n") for line in source]
    for value in Fingerprinter(config).fingerprint_texts(texts).tolist():
        print(f"{value:016x}")
    return 0


def read_fingerprints(path: Path) -> npt.NDArray[np.uint64]:
    """Parse a file of 16-hex-digit lines; errors name the offending line."""
    source: TextIO = sys.stdin if str(path) == "-" else path.open(encoding="ascii")
    with source:
        lines = source.read().split()
    try:
        return np.array([int(line, 16) for line in lines], dtype=np.uint64)
    except (ValueError, OverflowError):
        bad = next(i for i, line in enumerate(lines) if not _is_fingerprint(line))
        raise ValueError(
            f"{path}: line {bad + 1} is not a 16-hex-digit fingerprint: {lines[bad][:40]!r}"
        ) from None


def _is_fingerprint(text: str) -> bool:
    if len(text) != 16:
        return False
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def _write_columns(out: TextIO, *columns: npt.NDArray[Any]) -> None:
    """Write integer columns space-separated, in chunks (fast for millions of rows)."""
    table = np.column_stack([c.astype(np.int64) for c in columns]) if columns[0].size else None
    if table is None:
        return
    for start in range(0, table.shape[0], 1 << 16):
        chunk = table[start : start + (1 << 16)]
        out.write("\n".join(" ".join(map(str, row)) for row in chunk.tolist()) + "\n")


def _fail(message: str) -> int:
    print(f"neardup: error: {message}", file=sys.stderr)
    return 2
