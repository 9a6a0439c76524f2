"""How fast this host runs a fixed piece of Python, to read figures from different hosts by.

The soak benchmark's hosts took 0.29-0.36 s of CPU for ``FIXED_WORK`` on 24-25 Nov; 28 Nov's
took 0.55-0.79 s, and the whole stack's CPU per page decided in ``bench_worker.py`` was
296-347 us there against 140-158 us in 27 Nov's fast periods, at the same worker code. So a
throughput figure is read beside its host's fixed work, and two versions are compared by
interleaved runs on one host, never across hosts.
"""

from __future__ import annotations

import subprocess
import sys

#: Pure interpreter work (no I/O, no allocation beyond small ints): ~0.3 s on a fast host.
FIXED_WORK = (
    "import time\nt = time.process_time()\ns = 0\nfor i in range(3_000_000):\n    s += i * i % 7\n"
    "print(time.process_time() - t)"
)


def fixed_work_seconds() -> float:
    """CPU seconds ``FIXED_WORK`` took in a fresh interpreter. It runs at the lowest priority:
    at full priority its ~0.4 s of a core took that core from a stack under test (the soak's
    every window showed a burst of late pages)."""
    found = subprocess.run(
        ["nice", "-n", "19", sys.executable, "-c", FIXED_WORK],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(found.stdout)


def host_speed_line() -> str:
    """The line a benchmark prints before it runs (the median of three probes)."""
    runs = sorted(fixed_work_seconds() for _ in range(3))
    return (
        f"host speed: fixed work {runs[1]:.3f} s CPU (median of 3; the 24-25 Nov hosts took "
        "0.29-0.36 s: read the figures below beside it)"
    )
