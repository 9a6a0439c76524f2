"""A silent crawl peer still running on this machine (paused) keeps its queue
(crawler.peers_here): its journal is not taken over, so its requests are not fetched twice."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler.peers_here import PausedPeers, alive_here, process_token, start_mark
from crawler.sharing import HUNGRY, PEER_TIMEOUT, SILENT_AFTER, WorkSharing, encode_request
from tests.unit.crawler.test_sharing import Clock, JournalStore, _request, _spider

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def _token(pid: int, mark: str | None) -> str:
    return f"{socket.gethostname()}:{pid}:{mark}-0123abcd"


def test_a_token_names_this_host_pid_and_start_time() -> None:
    host, pid, rest = process_token().split(":")
    assert host == socket.gethostname() and int(pid) == os.getpid()
    assert rest.split("-")[0] == start_mark(os.getpid())
    assert process_token() != process_token()  # the random part: two crawlers, one process


def test_a_process_of_this_machine_is_alive_while_it_runs_or_is_paused(
    child: subprocess.Popen[bytes],
) -> None:
    token = _token(child.pid, start_mark(child.pid))
    assert alive_here(token) is True
    os.kill(child.pid, signal.SIGSTOP)  # Ctrl-Z
    assert alive_here(token) is True
    os.kill(child.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10  # the kill lands asynchronously (a busy machine)
    while alive_here(token) is not False and time.monotonic() < deadline:
        time.sleep(0.01)
    assert alive_here(token) is False  # not reaped yet, a zombie: it has ended
    child.wait()
    assert alive_here(token) is False  # reaped: no such process


def test_a_reused_pid_is_another_process(child: subprocess.Popen[bytes]) -> None:
    mark = start_mark(child.pid)
    assert mark is not None
    assert alive_here(_token(child.pid, f"{int(mark, 16) + 1:x}")) is False


def test_what_this_machine_cannot_tell_is_left_to_the_beats_age(
    child: subprocess.Popen[bytes],
) -> None:
    mark = start_mark(child.pid)
    assert alive_here(f"another-host:{child.pid}:{mark}-0123abcd") is None
    assert alive_here(f"{socket.gethostname()}:{child.pid}:0123abcd") is None  # older format
    assert alive_here(_token(child.pid, "0")) is None  # no start time where it ran
    assert alive_here(_token(os.getpid(), start_mark(os.getpid()))) is None  # this process
    assert alive_here("p1") is None and alive_here("h:x:1-2") is None
    assert alive_here(_token(child.pid, mark), proc=Path("/nonexistent")) is None


def test_a_paused_peers_journal_stays_with_it_and_an_ended_ones_is_taken_over() -> None:
    """The same silent peer, its beat aged out: alive on this machine, nothing is taken (it
    fetches its queue when it resumes); once it has ended, its journal goes to the list."""
    clock, spider = Clock(), _spider()
    store = JournalStore(clock)
    answer: dict[str, bool | None] = {"paused": True}
    idle = WorkSharing(
        store, "idle", clock, fingerprint=lambda r: r.url.encode(), alive=answer.__getitem__
    )
    WorkSharing(store, "paused", clock, fingerprint=lambda r: r.url.encode()).beat(HUNGRY)
    store.remember("paused", {b"x": encode_request(_request("http://a.test/q"), spider) or b""})
    idle.beat(HUNGRY)
    for _ in range(int(SILENT_AFTER + PEER_TIMEOUT) // 5 + 2):  # the taker beats on
        clock.now += 5
        idle.beat(HUNGRY)
    assert idle.taken_from_killed == 0 and store.owes("paused") == 1
    assert not idle.take(None, spider)
    answer["paused"] = False  # it was killed since
    idle.beat(HUNGRY)
    assert idle.taken_from_killed == 1 and store.owes("paused") == 0
    assert [r.url for r in idle.take(None, spider)] == ["http://a.test/q"]


def test_a_paused_peer_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    paused = PausedPeers(lambda token: token == "here")
    assert paused("here") and paused("here") and not paused("gone")
    assert sum("still runs on this machine" in r.message for r in caplog.records) == 1
