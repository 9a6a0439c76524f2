"""The worker's Python work per page, thread by thread, without Kafka: CPU or instructions.

Run from the repository root (with the package installed)::

    python benchmarks/bench_instructions.py [--corpus corpus.jsonl] [--pages 11000]

It starts its own redis-server, builds the engine as the worker does (its defaults; any
``NEARDUP_*`` variable set applies) and runs ``bench_worker.py``'s pages in batches of 1,000,
each in two parts, as the worker's two threads do: the prefetch thread's (decode, fingerprint
and sketch) and the main thread's (the engine's store steps and verdicts, the decisions'
encoding and metrics). The first batch warms up and is not counted. It prints each part's
thread CPU per page.

Seconds vary from run to run with whatever else the machine does (the same worker code used
84-124 us of CPU a page in one evening). Instructions do not: under callgrind, with
``--callgrind PART``, only that part is instrumented (callgrind is switched on and off around
it), so the total callgrind prints is that part's instructions, the same within ~1% from run
to run::

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=main.cg \\
        python benchmarks/bench_instructions.py --corpus corpus.jsonl --pages 6000 \\
        --callgrind main

``callgrind_annotate main.cg`` then shows where they go. Compare two versions by their
totals (an instruction is not a nanosecond: the end-to-end benchmark is still the judge).
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bench_worker import page_bodies

from dedup_worker.contract.messages import decode_page
from dedup_worker.core.engine import DedupEngine
from dedup_worker.worker.batching import encode_decisions
from dedup_worker.worker.config import load_config
from dedup_worker.worker.main import GC_THRESHOLDS, build_backends, engine_settings
from dedup_worker.worker.metrics import WorkerMetrics
from neardup.stack import RedisServer

BATCH = 1000
PARTS = ("prefetch", "main")


def _callgrind(on: bool) -> None:
    """Switch callgrind's instrumentation of this process on or off."""
    state = "on" if on else "off"
    command = ["callgrind_control", "-i", state, str(os.getpid())]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--pages", type=int, default=11_000, help="pages, the first batch a warm-up"
    )
    parser.add_argument("--corpus", type=Path, help="JSONL corpus (default: synthetic text)")
    parser.add_argument("--callgrind", choices=PARTS, help="instrument only this part")
    args = parser.parse_args()
    if args.pages < 2 * BATCH:
        parser.error(f"--pages must be at least {2 * BATCH}: the first batch is a warm-up")
    bodies = [
        body.replace(b"%FETCHED%", b"1700000000.5")
        for body in page_bodies(args.pages, checksums=True, corpus=args.corpus)
    ]
    cpu = dict.fromkeys(PARTS, 0.0)
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)).start() as server:
        env = {k: v for k, v in os.environ.items() if k.startswith("NEARDUP_")}
        config = load_config([], env | {"NEARDUP_REDIS_URL": server.url})
        settings = engine_settings(config)
        index, docs = build_backends(config, settings.version_tag)
        engine = DedupEngine(index, docs, settings, record_cache=config.record_cache)
        metrics = WorkerMetrics()
        gc.set_threshold(*GC_THRESHOLDS)  # as the worker runs
        for lo in range(0, args.pages - args.pages % BATCH, BATCH):
            counted = lo > 0
            for part in PARTS:
                if counted and args.callgrind == part:
                    _callgrind(True)
                start = time.thread_time()
                if part == "prefetch":
                    prepared = engine.prepare([decode_page(b) for b in bodies[lo : lo + BATCH]])
                else:
                    decisions = engine.decide(prepared)
                    encode_decisions(decisions)
                    metrics.observe_decisions(decisions)
                if counted:
                    cpu[part] += time.thread_time() - start
                if counted and args.callgrind == part:
                    _callgrind(False)
    pages = args.pages - args.pages % BATCH - BATCH
    figures = ", ".join(f"{part} {seconds / pages * 1e6:.1f}" for part, seconds in cpu.items())
    print(f"{pages:,} pages after a warm-up batch; thread CPU, us a page: {figures}")


if __name__ == "__main__":
    main()
