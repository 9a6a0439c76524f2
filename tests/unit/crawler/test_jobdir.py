"""A ``JOBDIR`` whose last run was killed (:mod:`crawler.jobdir`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from queuelib.queue import FifoDiskQueue

from crawler.jobdir import QUEUE_FOLDER, QUEUE_STATE, RUNNING_FILE, JobdirRun
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


def _queue(jobdir: Path, state: str = "[5]") -> Path:
    """A queue as Scrapy leaves it at a close: a priority's folder, and its state."""
    (jobdir / QUEUE_FOLDER / "p5").mkdir(parents=True)
    (jobdir / QUEUE_FOLDER / QUEUE_STATE).write_text(state)
    return jobdir / QUEUE_FOLDER


def _killed(jobdir: Path, queue_restored: bool, adopted: bool) -> JobdirRun:
    """A run that marked ``jobdir`` and was killed (its mark stays)."""
    if queue_restored:
        _queue(jobdir)
    run = JobdirRun(jobdir, alive=lambda token: False)
    run.open(journals=True)
    run.started("host:1:mark-abc", adopted=adopted, resume_owes=False)
    return run


@pytest.mark.parametrize(("queue_restored", "adopted"), [(False, False), (True, True)])
def test_the_queue_of_a_killed_run_whose_journal_held_it_is_discarded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, queue_restored: bool, adopted: bool
) -> None:
    """Its journal holds all its queue: started with none left, or adopted the journal of
    the run it resumed. The next run discards the queue and keeps its own journal at close."""
    killed = _killed(tmp_path, queue_restored, adopted)
    assert killed.keeps_journal
    assert (tmp_path / RUNNING_FILE).read_text() == "host:1:mark-abc\ncomplete\n"
    queue = tmp_path / QUEUE_FOLDER / "p5"
    queue.mkdir(parents=True, exist_ok=True)
    (queue / "q00000").write_bytes(b"stale")
    resumed = JobdirRun(tmp_path, alive=lambda token: False)
    with caplog.at_level(logging.WARNING):
        resumed.open(journals=True)
    assert not resumed.queue_kept and not resumed.queue_restored
    assert resumed.killed == "host:1:mark-abc"  # its journal is handed back too
    assert not (tmp_path / QUEUE_FOLDER).exists()
    assert "host:1:mark-abc" in caplog.text and "did not close (killed?)" in caplog.text
    resumed.started("host:2:mark-def", adopted=False, resume_owes=False)
    assert resumed.keeps_journal  # nothing restored: its journal holds its queue
    resumed.closed()
    assert not (tmp_path / RUNNING_FILE).exists()


def test_the_queue_of_a_killed_run_whose_journal_did_not_hold_it_is_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run that resumed a queue without adopting a journal (left by a run without one)
    journals only what it claims: its queue is the only record of the rest, kept after a
    kill as Scrapy left it; nor is its journal kept at a close."""
    killed = _killed(tmp_path, queue_restored=True, adopted=False)
    assert not killed.keeps_journal
    assert (tmp_path / RUNNING_FILE).read_text().endswith("partial\n")
    resumed = JobdirRun(tmp_path, alive=lambda token: False)
    with caplog.at_level(logging.WARNING):
        resumed.open(journals=True)
    assert resumed.queue_kept and resumed.queue_restored
    assert (tmp_path / QUEUE_FOLDER / "p5").exists()
    assert "did not hold its whole queue" in caplog.text


def test_a_run_that_closed_leaves_its_queue_and_only_its_own_mark_goes(tmp_path: Path) -> None:
    first = _killed(tmp_path, queue_restored=True, adopted=True)
    first.closed()
    second = JobdirRun(tmp_path, alive=lambda token: False)
    second.open(journals=True)
    assert second.queue_kept and second.queue_restored
    second.started("host:2:mark-def", adopted=True, resume_owes=False)
    first.closed()  # closing late: the mark is the second run's now
    assert (tmp_path / RUNNING_FILE).read_text().startswith("host:2:mark-def")
    fresh = JobdirRun(tmp_path / "never-used")
    fresh.open(journals=True)
    assert fresh.queue_kept and not fresh.queue_restored
    for state in ("[]", "{}"):  # Scrapy's two priority queues, empty
        _queue(tmp_path / state, state=state)
        emptied = JobdirRun(tmp_path / state)
        emptied.open(journals=True)
        assert not emptied.queue_restored


def test_a_jobdir_whose_run_still_runs_is_refused(tmp_path: Path) -> None:
    """Two runs of one JOBDIR would share Scrapy's queue: the second would delete the first's."""
    queue = _queue(tmp_path)
    JobdirRun(tmp_path).started(process_token(), adopted=True, resume_owes=False)
    JobdirRun(tmp_path).open(journals=True)  # its own process: alive_here cannot tell
    assert not queue.exists()
    queue = _queue(tmp_path)
    JobdirRun(tmp_path).started("host:1:mark-abc", adopted=True, resume_owes=False)
    running = JobdirRun(tmp_path, alive=lambda token: token == "host:1:mark-abc")
    with pytest.raises(ConfigError, match="in use by a crawl process still running"):
        running.open(journals=True)
    assert (tmp_path / RUNNING_FILE).exists() and queue.exists()


def test_a_run_without_a_journal_reads_the_queue_and_drops_a_killed_runs_mark(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without Redis (or with sharing off) the queue is the only record: read as Scrapy left
    it, and the mark of the killed run before goes (a later run with a journal finding it
    deleted this run's queue, whose requests no journal holds)."""
    _killed(tmp_path, queue_restored=True, adopted=True)
    alone = JobdirRun(tmp_path, alive=lambda token: False)
    with caplog.at_level(logging.WARNING):
        alone.open(journals=False)
    assert alone.queue_kept and not alone.keeps_journal
    assert (tmp_path / QUEUE_FOLDER / "p5").exists() and not (tmp_path / RUNNING_FILE).exists()
    assert "without a journal in Redis" in caplog.text
    later = JobdirRun(tmp_path, alive=lambda token: False)
    later.open(journals=True)
    assert later.queue_kept and later.queue_restored


def test_a_mark_of_one_line_is_taken_for_partial(tmp_path: Path) -> None:
    """As the first version wrote it (its journal may not have held its queue)."""
    _queue(tmp_path)
    (tmp_path / RUNNING_FILE).write_text("host:1:mark-abc\n")
    run = JobdirRun(tmp_path, alive=lambda token: False)
    run.open(journals=True)
    assert run.queue_kept and (tmp_path / QUEUE_FOLDER / "p5").exists()


def test_a_run_whose_resume_file_owes_more_than_its_journal_holds_is_partial(
    tmp_path: Path,
) -> None:
    """A run resuming a file of pages or requests that no journal holds (left by a run
    without one), with no queue and no journal to adopt, does not hold all it owes."""
    run = JobdirRun(tmp_path, alive=lambda token: False)
    run.open(journals=True)
    run.started("host:1:mark-abc", adopted=False, resume_owes=True)
    assert not run.keeps_journal
    assert (tmp_path / RUNNING_FILE).read_text().endswith("partial\n")


def test_a_run_whose_sharing_failed_to_open_marks_itself_partial(tmp_path: Path) -> None:
    """It discarded a killed run's queue, then journaled nothing: the killed run's complete
    mark no longer stands for the queue it writes (the next run deleted it)."""
    _killed(tmp_path, queue_restored=True, adopted=True)
    resumed = JobdirRun(tmp_path, alive=lambda token: False)
    resumed.open(journals=True)
    assert not resumed.queue_kept
    resumed.alone()
    assert (tmp_path / RUNNING_FILE).read_text().endswith("partial\n")
    assert not resumed.keeps_journal
    _queue(tmp_path)  # what it leaves when killed: read back
    after_kill = JobdirRun(tmp_path, alive=lambda token: False)
    after_kill.open(journals=True)
    assert after_kill.queue_kept and after_kill.queue_restored


def test_a_run_that_never_marked_drops_a_killed_runs_mark_as_it_closes(tmp_path: Path) -> None:
    _killed(tmp_path, queue_restored=True, adopted=True)
    opened_badly = JobdirRun(tmp_path, alive=lambda token: False)
    opened_badly.closed()
    assert not (tmp_path / RUNNING_FILE).exists()
