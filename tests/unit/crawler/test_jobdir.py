"""A ``JOBDIR`` whose last run was killed (:mod:`crawler.jobdir`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from queuelib.queue import FifoDiskQueue

from crawler.jobdir import (
    QUEUE_FOLDER,
    RUNNING_FILE,
    discard_killed_queue,
    mark_closed,
    mark_running,
)
from crawler.peers_here import process_token
from dedup_worker.errors import ConfigError


def test_a_fifo_disk_queue_not_closed_is_read_back_wrong(tmp_path: Path) -> None:
    """The premise (Scrapy's ``PickleFifoDiskQueue`` is queuelib's): a queue whose process
    was killed left no state; the next one at the same path pops the old records and never
    the one pushed since, which the scheduler then counts as gone."""
    killed = FifoDiskQueue(tmp_path / "p0")
    for n in range(3):
        killed.push(b"old %d" % n)
    killed.headf.flush()  # written, as the OS keeps a killed process's writes
    resumed = FifoDiskQueue(tmp_path / "p0")
    resumed.push(b"new")
    assert (len(resumed), resumed.pop(), len(resumed), resumed.pop()) == (1, b"old 0", 0, None)


def test_the_queue_of_a_run_that_did_not_close_is_discarded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    queue = tmp_path / QUEUE_FOLDER / "p0"
    queue.mkdir(parents=True)
    (queue / "q00000").write_bytes(b"stale")
    mark_running(tmp_path, "host:1:mark-abc")
    assert (tmp_path / RUNNING_FILE).read_text() == "host:1:mark-abc\n"
    with caplog.at_level(logging.WARNING):
        assert discard_killed_queue(tmp_path)
    assert not (tmp_path / QUEUE_FOLDER).exists() and not (tmp_path / RUNNING_FILE).exists()
    assert "host:1:mark-abc" in caplog.text and "did not close (killed?)" in caplog.text
    assert not discard_killed_queue(tmp_path)  # once


def test_the_queue_of_a_run_that_closed_is_kept(tmp_path: Path) -> None:
    queue = tmp_path / QUEUE_FOLDER / "p0"
    queue.mkdir(parents=True)
    mark_running(tmp_path, "host:1:mark-abc")
    mark_closed(tmp_path)
    assert not discard_killed_queue(tmp_path)
    assert queue.exists()
    mark_closed(tmp_path)  # twice is harmless
    assert not discard_killed_queue(tmp_path / "never-used")  # a new JOBDIR: nothing to do


def test_a_jobdir_whose_run_still_runs_is_refused(tmp_path: Path) -> None:
    """Two runs of one JOBDIR would share Scrapy's queue: the second would delete the first's."""
    queue = tmp_path / QUEUE_FOLDER
    queue.mkdir()
    mark_running(tmp_path, process_token())  # this very process: alive_here cannot tell
    assert discard_killed_queue(tmp_path)
    mark_running(tmp_path, "host:1:mark-abc")
    with pytest.raises(ConfigError, match="in use by a crawl process still running"):
        discard_killed_queue(tmp_path, alive=lambda token: token == "host:1:mark-abc")
    assert (tmp_path / RUNNING_FILE).exists()
