"""Whether a crawl peer that stopped beating is a process still alive on this machine.

A peer's journal is taken over once its beat is ``PEER_TIMEOUT`` old, because a process that
stops beating was most likely killed. But a process can also be *paused*: Ctrl-Z in a terminal,
a debugger, a machine swapping. Taken over, such a process's queue went to the crawl's shared
list, and when it resumed it fetched the same requests as the peer that took them: every
request it had queued, fetched twice.

When the silent peer ran on this machine, the answer is at hand: its token carries the host, the
pid and the process's start time (pids are reused; a pid with another start time is another
process), and ``/proc`` says whether that process still exists and is not a zombie (killed, not
reaped yet). A paused process is then left alone: it fetches its own queue when it resumes, and
its peers do not wait for it longer than ``PEER_TIMEOUT`` (they stop counting it as a peer).
A peer of another machine, of this very process (a second crawler in one process), a token
without a start time, or a machine without ``/proc``: the beat's age alone decides, as before.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

#: /proc/<pid>/stat's states of a process that will never run again: zombie, dead.
_GONE_STATES = frozenset("ZXx")


def start_mark(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The process's start time (clock ticks after boot, hex), None if it does not exist or has
    ended (or this machine has no ``/proc``)."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after "pid (comm)": comm may hold spaces
    if len(fields) < 20 or fields[0] in _GONE_STATES:
        return None
    return f"{int(fields[19]):x}"


def process_token() -> str:
    """This process in the peer table: host, pid, and its start time beside a random part
    (``host:pid:start-random``)."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{start_mark(pid) or '0'}-{uuid.uuid4().hex[:8]}"


def alive_here(token: str, proc: Path = Path("/proc")) -> bool | None:
    """True: ``token``'s process runs on this machine (maybe paused); False: it ran here and
    has ended; None: this machine cannot tell (see the module docstring)."""
    parts = token.split(":")
    if len(parts) != 3 or parts[0] != socket.gethostname() or "-" not in parts[2]:
        return None
    try:
        pid = int(parts[1])
    except ValueError:
        return None
    mark = parts[2].split("-", 1)[0]
    if pid == os.getpid() or mark == "0" or not (proc / "self").exists():
        return None
    return start_mark(pid, proc) == mark


class PausedPeers:
    """Asked for each silent peer before its journal is taken over: True for one whose process
    still runs on this machine (paused, not killed). Logs each such peer once."""

    def __init__(self, alive: Callable[[str], bool | None] = alive_here) -> None:
        self._alive = alive
        self._logged: set[str] = set()

    def __call__(self, token: str) -> bool:
        if self._alive(token) is not True:
            return False
        if token not in self._logged:
            self._logged.add(token)
            logger.warning(
                "process %s of the crawl stopped beating but still runs on this machine "
                "(paused?): the requests it claimed stay with it until it resumes or ends",
                token,
            )
        return True
