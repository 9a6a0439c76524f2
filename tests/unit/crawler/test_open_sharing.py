"""Work sharing as a crawl opens (:meth:`crawler.resuming.Resuming._open_sharing`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from crawler.frontier import ResumeState
from crawler.resuming import Resuming


def test_redis_failing_as_sharing_opens_leaves_the_process_alone(caplog: Any) -> None:
    """Raising out of ``spider_opened`` skipped the rest of the opening (the poll loop among
    it): the crawl waited on ``DontCloseSpider`` for ever."""

    def fails(*args: Any) -> None:
        raise ConnectionError("Redis at 127.0.0.1:1 refused the connection")

    resuming: Any = Resuming()
    resuming.jobdir_run = None
    resuming.session = SimpleNamespace(open_sharing=fails)
    resuming.links = SimpleNamespace(sharing=object())
    resuming._open_sharing(ResumeState())
    assert resuming.links.sharing is None
    assert "work sharing failed to open" in caplog.text
