"""A ``JOBDIR`` whose last run was killed: its request queue is not read back.

Scrapy writes the state of its disk queue (queuelib's ``info.json`` in each priority's folder,
the scheduler's ``active.json``) only as the spider closes. After a kill (``kill -9``, a second
Ctrl-C, the machine going down) the next run opens the queue files as they are: a FIFO queue
without its state reads from the start of its first file, so its pops return the killed run's
oldest records, fetched long ago, and the requests pushed since are never popped (the scheduler
counts only those). Measured with the second held-out set, one spider killed 8 s in and resumed
with the same ``JOBDIR``: 4 and 6 unique pages lost, with the crawl's journal taking over all
that the killed run owed.

So a run that journals in Redis (:mod:`crawler.sharing`: every request it claims and has not
settled, its queue's included) marks the ``JOBDIR`` as it opens and unmarks it once it has
closed well. A run that finds the mark discards the queue before Scrapy opens it and leaves
the recovery to the journal, which the crawl takes over from the killed process as from any
other. A run without Redis journals nothing and keeps the queue as Scrapy left it.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from crawler.peers_here import alive_here
from dedup_worker.errors import ConfigError

logger = logging.getLogger(__name__)

#: Present while a run of the ``JOBDIR`` is open; holds its process token.
RUNNING_FILE = "neardup-running"
#: Scrapy's request queue folder in a ``JOBDIR`` (``scrapy.core.scheduler.Scheduler``).
QUEUE_FOLDER = "requests.queue"


def discard_killed_queue(jobdir: Path, alive: Callable[[str], bool | None] = alive_here) -> bool:
    """Before Scrapy opens the queue: if the run before did not close (the mark is there),
    its request queue is deleted. Whether it was. A ``ConfigError`` if that run's process
    still runs on this machine (``alive``): two runs of one ``JOBDIR`` would share its queue."""
    mark = jobdir / RUNNING_FILE
    if not mark.exists():
        return False
    token = mark.read_text(encoding="utf-8", errors="replace").strip()
    if alive(token):
        raise ConfigError(
            f"JOBDIR {jobdir} is in use by a crawl process still running ({token}): a JOBDIR "
            "serves one run at a time; wait for that run to end (or stop it), or give this "
            "one another JOBDIR"
        )
    queue = jobdir / QUEUE_FOLDER
    if queue.exists():
        shutil.rmtree(queue)
    mark.unlink()
    logger.warning(
        "the last run of JOBDIR %s (process %s) did not close (killed?): Scrapy's request "
        "queue there cannot be read back after a kill and is discarded; the crawl takes over "
        "what that process owed from its journal in Redis (after 30 s of silence)",
        jobdir,
        token or "?",
    )
    return True


def mark_running(jobdir: Path, token: str) -> None:
    """This run is open (journaling): a kill leaves the mark."""
    jobdir.mkdir(parents=True, exist_ok=True)
    tmp = jobdir / (RUNNING_FILE + ".tmp")
    tmp.write_text(token + "\n", encoding="utf-8")
    tmp.replace(jobdir / RUNNING_FILE)


def mark_closed(jobdir: Path) -> None:
    """This run closed well: Scrapy has written its queue's state."""
    (jobdir / RUNNING_FILE).unlink(missing_ok=True)
