"""What a crawler process leaves behind as it closes: the part of
:class:`~crawler.scheduling.DecisionScheduler` that leaves what the process owes to a later run
or hands it to the crawl's other processes, counts the outlinks nobody fetched, leaves the
crawl's peer table, closes the URL rules and writes ``NEARDUP_STATS_FILE``. Kept apart so each
module reads on its own, as :mod:`crawler.resuming` is; the order of the close
(``DecisionScheduler._close_down``) and the state are the extension's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawler import stats as dedup_stats
from crawler.config import CrawlConfig
from crawler.links import LinkScheduler
from crawler.rules_setup import uninstall_rules
from crawler.seen_redis import RedisSeenStore
from crawler.session import NeardupSession

logger = logging.getLogger(__name__)


class Closing:
    """Leaving what the crawl owes as it closes (see the module docstring)."""

    stats: Any
    config: CrawlConfig
    links: LinkScheduler
    session: NeardupSession

    def _leave(self, leave: Callable[[], int], what: str) -> None:
        """Leave ``what`` to a later run (``leave`` says how many); the crawl is over, so a
        failure only leaves them claimed."""
        try:
            left = leave()
        except Exception:
            logger.exception("leaving the %s to a later run failed", what)
            return
        if left:
            logger.info(
                "%d %s left for a later run of crawl %r", left, what, self.session.crawl_id()
            )

    def _leave_counted(self) -> None:
        """The saved-bytes estimate asks Redis: a failure must not skip the last flush and
        the resume file that follow it."""
        try:
            self.links.count_saved()
        except Exception:
            logger.exception("counting the outlinks nobody fetched failed")

    def _leave_sharing(self, save_resume: Callable[[str], None], keep_journal: bool) -> None:
        """The last flush (requests whose hand-over failed before), the resume file
        (``save_resume``, given the process whose journal it names), then out of the peer
        table; the store gives back what it took and did not use as it closes. With
        ``keep_journal`` (a ``JOBDIR`` run whose journal holds its queue: ``crawler.jobdir``)
        the journal stays, for the resume to adopt: the resume file naming it is written
        first, so a kill between the two leaves it in the table, to be taken over."""
        sharing, self.links.sharing = self.links.sharing, None
        if sharing is None:
            save_resume("")
            return
        if sharing.taken_from_killed:
            self.stats.set_value("dedup/requests_taken_from_killed", sharing.taken_from_killed)
        try:
            sharing.flush()
        except Exception:
            if sharing.fingerprint is None:  # no journal: the outbox stays claimed
                logger.exception("handing the last requests over to the crawl failed")
            else:  # still in this process's journal: taken over once its beat ages out
                logger.exception(
                    "handing the last requests over to the crawl failed; this process stays "
                    "in the crawl's peer table, so a later run takes over what it owes"
                )
                save_resume("")
                sharing.store.close()
                return
        keep = keep_journal and sharing.fingerprint is not None
        if keep:  # the pages settled since the last claim leave the journal kept
            try:
                self.session.seen().flush()
            except Exception as exc:  # they stay in it: fetched again after a kill, never lost
                logger.warning("settling the last pages in the journal failed: %s", exc)
        save_resume(sharing.token if keep else "")
        try:
            sharing.leave(keep_journal=keep)
        except Exception:  # peers see this process's beat age out
            logger.exception("leaving the crawl's peer table failed")
            return
        store = self.session.seen().store
        if isinstance(store, RedisSeenStore):
            store.end_journal(kept=keep)  # left whole: nothing for anyone to take over

    def _close_rules(self) -> None:
        installed, self.session.rules = self.session.rules, None
        if installed is None:
            return
        try:
            installed.close()
        except Exception:  # the crawl is over: counts lost, nothing else
            logger.exception("closing the URL rules failed")
        uninstall_rules(self.session)

    def _write_stats(self, reason: str) -> None:
        path = self.config.stats_file
        if not path:
            return
        stats = {
            key: value
            for key, value in self.stats.get_stats().items()
            if key.startswith(dedup_stats.PREFIX) or key == "elapsed_time_seconds"
        }
        stats["finish_reason"] = reason
        stats["crawl_id"] = self.session.crawl_id()
        try:
            Path(path).write_text(json.dumps(stats, indent=1, sort_keys=True, default=str))
        except OSError as exc:
            logger.error("cannot write NEARDUP_STATS_FILE %s: %s", path, exc)
