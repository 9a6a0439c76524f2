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
settled) marks the ``JOBDIR`` as it opens and unmarks it once it has closed well. Its journal
is *complete* when it holds all the run owes: the run before left neither a queue nor a resume
file owing pages or requests, or its journal, kept at its close (complete in turn), was
adopted; a run whose sharing failed to open is marked incomplete (*partial*). A run that
finds the mark of a complete journal discards the queue before Scrapy opens it and leaves the
recovery to the journal, which the crawl takes over from the killed process as from any
other; a mark of an incomplete one (a queue left by a run without a journal: sharing off, or
an older version of neardup) keeps the queue as Scrapy left it, the only record of those
requests. Only a complete journal is kept at a good close for the resume to adopt. A run
without Redis (or with sharing off) journals nothing, keeps the queue as Scrapy left it and
drops a killed run's mark, which no longer stands for the queue it writes.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from crawler.peers_here import alive_here, process_token
from dedup_worker.errors import ConfigError

logger = logging.getLogger(__name__)

#: Present while a run of the ``JOBDIR`` is open: its process token, and ``complete`` or
#: ``partial`` (whether its journal holds its whole queue).
RUNNING_FILE = "neardup-running"
#: Scrapy's request queue folder in a ``JOBDIR`` (``scrapy.core.scheduler.Scheduler``), and
#: the file naming its queues that hold requests, written as the spider closes.
QUEUE_FOLDER = "requests.queue"
QUEUE_STATE = "active.json"


class JobdirRun:
    """One run's dealings with its ``JOBDIR``'s mark (see the module docstring)."""

    def __init__(self, jobdir: Path, alive: Callable[[str], bool | None] = alive_here) -> None:
        self.jobdir = jobdir
        self.alive = alive
        self.queue_kept = True  # False: the run before was killed, its queue discarded
        self.killed = ""  # the token of that run, whose journal the crawl takes over
        self.queue_restored = False  # Scrapy restores requests from the queue left
        self.token: str | None = None  # marked by this run (journaling)
        self.complete = False

    def open(self, journals: bool) -> None:
        """Before Scrapy's scheduler opens the queue (built after the extensions). A run that
        ``journals`` nothing (no Redis, sharing off) reads the queue as it is, and the mark of
        a killed run goes: the queue it leaves holds requests that no journal does."""
        if not journals:
            token, _ = _read_mark(self.jobdir)
            if token is not None:
                logger.warning(
                    "the last run of JOBDIR %s (process %s) did not close (killed?); without a "
                    "journal in Redis this run reads Scrapy's request queue as it is (after a "
                    "kill it may give old requests again and lose newer ones)",
                    self.jobdir,
                    token,
                )
                (self.jobdir / RUNNING_FILE).unlink(missing_ok=True)
            return
        self.queue_kept = not self._discard_killed_queue()
        self.queue_restored = queue_left(self.jobdir)

    def started(self, token: str, adopted: bool, resume_owes: bool) -> None:
        """This run journals as ``token``. Its journal holds all it owes when it ``adopted``
        the journal of the run it resumes, or that run left no queue and no resume file
        owing pages or requests (``resume_owes``): those are in no journal of ours."""
        self.token = token
        self.complete = adopted or not (self.queue_restored or resume_owes)
        self._mark()

    def alone(self) -> None:
        """This run journals nothing after all (Redis failed as sharing opened): marked
        partial, so after its kill its queue is read back, and a killed run's mark before it
        (whose queue it may have discarded) no longer stands for it."""
        self.token, self.complete = process_token(), False
        self._mark()

    def _mark(self) -> None:
        assert self.token is not None
        self.jobdir.mkdir(parents=True, exist_ok=True)
        tmp = self.jobdir / (RUNNING_FILE + ".tmp")
        state = "complete" if self.complete else "partial"
        tmp.write_text(f"{self.token}\n{state}\n", "utf-8")
        tmp.replace(self.jobdir / RUNNING_FILE)

    @property
    def keeps_journal(self) -> bool:
        """Whether this run's journal stays at a good close, for the resume to adopt."""
        return self.token is not None and self.complete

    def closed(self) -> None:
        """This run closed well: Scrapy has written its queue's state. Its own mark goes, or,
        if it never marked (its opening failed first), a killed run's mark before it, which no
        longer stands for the queue (another run's, which started meanwhile, stays)."""
        if _read_mark(self.jobdir)[0] in (self.token, None) or self.token is None:
            (self.jobdir / RUNNING_FILE).unlink(missing_ok=True)

    def _discard_killed_queue(self) -> bool:
        """If the run before did not close (its mark is there) and its journal was complete,
        its request queue is deleted. Whether it was. A ``ConfigError`` if that run's process
        still runs on this machine: two runs of one ``JOBDIR`` would share its queue."""
        token, complete = _read_mark(self.jobdir)
        if token is None:
            return False
        if self.alive(token):
            raise ConfigError(
                f"JOBDIR {self.jobdir} is in use by a crawl process still running ({token}): "
                "a JOBDIR serves one run at a time; wait for that run to end (or stop it), or "
                "give this one another JOBDIR"
            )
        if not complete:
            logger.warning(
                "the last run of JOBDIR %s (process %s) did not close (killed?) and its journal "
                "did not hold its whole queue: Scrapy's request queue is read back as it is "
                "(after a kill it may give old requests again and lose newer ones)",
                self.jobdir,
                token,
            )
            return False
        queue = self.jobdir / QUEUE_FOLDER
        if queue.exists():
            shutil.rmtree(queue)
        self.killed = token
        logger.warning(
            "the last run of JOBDIR %s (process %s) did not close (killed?): Scrapy's request "
            "queue there cannot be read back after a kill and is discarded; the crawl takes "
            "over what that process owed from its journal in Redis (after 30 s of silence)",
            self.jobdir,
            token,
        )
        return True


def queue_left(jobdir: Path) -> bool:
    """Whether Scrapy's queue in ``jobdir`` holds requests (its state names a queue)."""
    state = jobdir / QUEUE_FOLDER / QUEUE_STATE
    try:
        return bool(json.loads(state.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return False
    except ValueError:  # unreadable: Scrapy will fail on it too; count it as holding some
        return True


def _read_mark(jobdir: Path) -> tuple[str | None, bool]:
    """The token of the run that marked ``jobdir`` (None: no mark), and its completeness."""
    try:
        lines = (jobdir / RUNNING_FILE).read_text(encoding="utf-8", errors="replace").split()
    except FileNotFoundError:
        return None, False
    return (lines[0] if lines else "?"), lines[1:2] == ["complete"]
