"""A silent crawl peer still running on this machine (paused) keeps its queue for a while
(crawler.peers_here): its journal is not taken over at once, so its requests are not fetched
twice, and its idle peers wait for it before they take it over, so none is left unfetched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crawler.peers_here import (
    PAUSED_PEER_TIMEOUT,
    PausedPeers,
    alive_here,
    machine_mark,
    process_token,
    start_mark,
)
from crawler.sharing import HUNGRY, PEER_TIMEOUT, WorkSharing, encode_request
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


def _token(pid: int, start: str | None, machine: str | None = None) -> str:
    return f"host:{pid}:{start}.{machine or machine_mark()}-0123abcd"


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]


def _until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Signals land asynchronously (a busy machine): wait for their effect, 10 s at most."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_token_names_the_pid_and_marks_this_process() -> None:
    _, pid, rest = process_token().split(":")
    start, machine = rest.split("-")[0].split(".", 1)
    assert int(pid) == os.getpid() and start == start_mark(os.getpid())
    assert machine == machine_mark()
    assert process_token() != process_token()  # the random part: two crawlers, one process


def test_a_process_of_this_machine_is_alive_while_it_runs_or_is_paused(
    child: subprocess.Popen[bytes],
) -> None:
    token = _token(child.pid, start_mark(child.pid))
    assert alive_here(token) is True
    os.kill(child.pid, signal.SIGSTOP)  # Ctrl-Z
    _until(lambda: _state(child.pid) == "T")
    assert _state(child.pid) == "T" and alive_here(token) is True
    os.kill(child.pid, signal.SIGKILL)
    _until(lambda: alive_here(token) is False)
    assert _state(child.pid) == "Z" and alive_here(token) is False  # killed, not reaped yet
    child.wait()
    assert alive_here(token) is False  # reaped: no such process


def test_a_reused_pid_is_another_process(child: subprocess.Popen[bytes]) -> None:
    start = start_mark(child.pid)
    assert start is not None
    assert alive_here(_token(child.pid, f"{int(start, 16) + 1:x}")) is False


def test_what_this_machine_cannot_tell_is_left_to_the_beats_age(
    child: subprocess.Popen[bytes],
) -> None:
    start = start_mark(child.pid)
    assert alive_here(_token(child.pid, start, "1.2")) is None  # another container or machine
    assert alive_here(f"host:{child.pid}:0123abcd") is None  # a token of before 30 Nov
    assert alive_here(f"host:{child.pid}:0-0123abcd") is None  # no /proc where it ran
    assert alive_here(_token(os.getpid(), start_mark(os.getpid()))) is None  # this process
    assert alive_here("p1") is None and alive_here(f"host:x:{start}.{machine_mark()}-1") is None
    assert alive_here(_token(child.pid, start), proc=Path("/nonexistent")) is None


def _paused_peer(clock: Clock, alive: dict[str, bool | None]) -> tuple[WorkSharing, JournalStore]:
    """An idle journaling process, and a peer "paused" that beat once and owes one request."""
    store = JournalStore(clock)
    idle = WorkSharing(
        store, "idle", clock, fingerprint=lambda r: r.url.encode(), alive=alive.__getitem__
    )
    WorkSharing(store, "paused", clock, fingerprint=lambda r: r.url.encode()).beat(HUNGRY)
    owed = encode_request(_request("http://a.test/q"), _spider()) or b""
    store.remember("paused", {b"x": owed})
    idle.beat(HUNGRY)
    return idle, store


def _beats_until(idle: WorkSharing, clock: Clock, age: float) -> None:
    while clock.now < 1_000.0 + age:  # the idle process beats on (Clock starts at 1,000)
        clock.now += 5
        idle.beat(HUNGRY)


def test_a_paused_peers_journal_stays_with_it_and_an_ended_ones_is_taken_over() -> None:
    """The same silent peer, its beat aged out: alive on this machine, nothing is taken (it
    fetches its queue when it resumes) and the idle process waits; once it has ended, its
    journal goes to the list."""
    clock, alive = Clock(), {"paused": True}
    idle, store = _paused_peer(clock, alive)
    _beats_until(idle, clock, PEER_TIMEOUT + 10)
    assert idle.taken_from_killed == 0 and store.owes("paused") == 1
    assert not idle.take(None, _spider()) and idle.waits_for_peers(None)
    alive["paused"] = False  # it was killed since
    idle.beat(HUNGRY)
    assert idle.taken_from_killed == 1 and store.owes("paused") == 0
    assert [r.url for r in idle.take(None, _spider())] == ["http://a.test/q"]


def test_a_peer_paused_too_long_is_taken_over_all_the_same() -> None:
    """A forgotten Ctrl-Z, a hung process: its queue must not stay unfetched."""
    clock, alive = Clock(), {"paused": True}
    idle, store = _paused_peer(clock, alive)
    _beats_until(idle, clock, PAUSED_PEER_TIMEOUT - 5)
    assert not idle.take(None, _spider()) and idle.waits_for_peers(None)  # it waits
    assert idle.taken_from_killed == 0
    _beats_until(idle, clock, PAUSED_PEER_TIMEOUT + 5)
    assert idle.taken_from_killed == 1 and store.owes("paused") == 0
    assert [r.url for r in idle.take(None, _spider())] == ["http://a.test/q"]


def test_a_paused_peer_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    paused = PausedPeers(lambda token: token == "here")
    assert paused("here", 40) and paused("here", 50) and not paused("gone", 40)
    assert not paused("here", PAUSED_PEER_TIMEOUT + 1)
    assert sum("still runs on this machine" in r.message for r in caplog.records) == 1


def test_after_a_gap_in_its_own_beats_a_process_waits_for_a_silent_peers_journal() -> None:
    """Redis out of reach for everyone past PAUSED_PEER_TIMEOUT: back, a process takes nobody
    over for PEER_TIMEOUT (live peers' rows aged too). A silent peer's journal is then neither
    taken nor waited for unless it waits: it closed, the journal unfetched by the run."""
    clock, alive = Clock(), {"paused": None}  # killed, or of another machine: not known here
    idle, _ = _paused_peer(clock, alive)
    clock.now += PAUSED_PEER_TIMEOUT + 10
    idle.beat(HUNGRY)
    assert idle.taken_from_killed == 0
    assert not idle.take(None, _spider()) and idle.waits_for_peers(None)
    _beats_until(idle, clock, PAUSED_PEER_TIMEOUT + 10 + PEER_TIMEOUT + 5)
    assert idle.taken_from_killed == 1
    assert [r.url for r in idle.take(None, _spider())] == ["http://a.test/q"]
