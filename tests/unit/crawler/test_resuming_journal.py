"""What a ``JOBDIR`` resume sends out goes into the process's journal
(:meth:`crawler.resuming.Resuming._journal_resumed`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from scrapy import Request

from crawler.frontier import ResumeState
from crawler.resuming import Resuming


class _Sharing:
    fingerprint = None

    def __init__(self) -> None:
        self.journaled: list[str] = []

    def journal_again(self, requests: list[Any], spider: Any) -> None:
        self.journaled += [r.url for r in requests]


def _saved(url: str) -> dict[str, Any]:
    return {**Request(url).to_dict(), "_neardup_url": url}


def test_every_request_a_resume_sends_out_is_journaled() -> None:
    """Claimed by the run before, which may have journaled none of them (sharing off, an
    older version): in no journal, a kill of this run (its queue discarded) lost them."""
    resume = ResumeState(
        deferred=[_saved("http://a/deferred")],
        paced=[_saved("http://a/paced")],
        waiting=[("http://a/", 1.0, 0, _saved("http://a/waiting"))],
        kept=[("http://a/", 1.0, 1, 0.5, [_saved("http://a/kept")])],
        held=[[_saved("http://a/held")]],
    )
    resuming: Any = Resuming()
    sharing = _Sharing()
    resuming.links = SimpleNamespace(sharing=sharing)
    resuming._journal_resumed(None, resume)
    assert sorted(sharing.journaled) == [
        "http://a/deferred", "http://a/held", "http://a/kept", "http://a/paced", "http://a/waiting",
    ]  # fmt: skip
    resuming.links = SimpleNamespace(sharing=None)
    resuming._journal_resumed(None, resume)  # no sharing: nothing to journal into


def test_redis_failing_as_sharing_opens_leaves_the_process_alone(caplog: Any) -> None:
    """Raising out of ``spider_opened`` skipped the rest of the opening (the poll loop among
    it): the crawl waited on ``DontCloseSpider`` for ever."""

    def fails(*args: Any) -> None:
        raise ConnectionError("Redis at 127.0.0.1:1 refused the connection")

    resuming: Any = Resuming()
    resuming.jobdir_run = None
    resuming.session = SimpleNamespace(open_sharing=fails)
    resuming.links = SimpleNamespace(sharing=object())
    resuming._open_sharing("")
    assert resuming.links.sharing is None
    assert "work sharing failed to open" in caplog.text
