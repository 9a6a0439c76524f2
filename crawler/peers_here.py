"""Whether a crawl peer that stopped beating is a process still alive on this machine.

A peer's journal is taken over once its beat is ``PEER_TIMEOUT`` old, because a process that
stops beating was most likely killed. But a process can also be *paused*: Ctrl-Z in a terminal,
a debugger, a machine swapping. Taken over, such a process's queue went to the crawl's shared
list, and when it resumed it fetched the same requests as the peer that took them: every
request it had queued, fetched twice.

When the silent peer ran on this machine, the answer is at hand: its token carries the pid and
a mark of the process (its start time, pids being reused; its pid namespace and the machine's
boot id, pids of other containers and machines meaning other processes), and ``/proc`` says
whether that process still exists and is not a zombie (killed, not reaped yet). A paused
process is left alone for ``PAUSED_PEER_TIMEOUT``: it fetches its own queue when it resumes.
Past that it is taken over all the same (a forgotten Ctrl-Z, a hung process, a crawler ended
in a process that lives on): its queue is then fetched twice if it resumes, never left
unfetched. A peer of another machine or container, of this very process (a second crawler in
one process), a token without a mark, or a machine without ``/proc``: the beat's age alone
decides, as before.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

#: Seconds a silent peer alive on this machine (paused) keeps its queue; its idle peers wait
#: for it that long before they take it over (a longer silence is a hang, or forgotten).
PAUSED_PEER_TIMEOUT = 120.0

#: /proc/<pid>/stat's states of a process that will never run again: zombie, dead.
_GONE_STATES = frozenset("ZXx")
_PROC = Path("/proc")


def start_mark(pid: int, proc: Path = _PROC) -> str | None:
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


def machine_mark(proc: Path = _PROC) -> str | None:
    """This process's pid namespace and the machine's boot (hex), None without ``/proc``:
    a pid means this process only where both are the same."""
    try:
        namespace = (proc / "self" / "ns" / "pid").stat().st_ino
        boot = (proc / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return None
    return f"{namespace:x}.{boot.replace('-', '')[:12]}"


def process_token() -> str:
    """This process in the peer table: ``host:pid:mark-random``, the mark its start time, pid
    namespace and boot (``0`` where there is no ``/proc``), the random part told apart two
    crawlers of one process."""
    pid = os.getpid()
    start, machine = start_mark(pid), machine_mark()
    mark = f"{start}.{machine}" if start and machine else "0"
    return f"{socket.gethostname()}:{pid}:{mark}-{uuid.uuid4().hex[:8]}"


def alive_here(token: str, proc: Path = _PROC) -> bool | None:
    """True: ``token``'s process runs on this machine (maybe paused); False: it ran here and
    has ended; None: this machine cannot tell (see the module docstring)."""
    parts = token.split(":")
    if len(parts) != 3 or "-" not in parts[2]:
        return None
    start, _, machine = parts[2].split("-", 1)[0].partition(".")
    try:
        pid = int(parts[1])
    except ValueError:
        return None
    if pid == os.getpid() or not machine or machine != machine_mark(proc):
        return None
    return start_mark(pid, proc) == start


class PausedPeers:
    """Asked for each silent peer (its beat ``age`` seconds old) before its journal is taken
    over: True for one whose process still runs on this machine, paused, and not for longer
    than ``PAUSED_PEER_TIMEOUT``. Logs each such peer once."""

    def __init__(self, alive: Callable[[str], bool | None] = alive_here) -> None:
        self._alive = alive
        self._logged: set[str] = set()

    def __call__(self, token: str, age: float) -> bool:
        if age > PAUSED_PEER_TIMEOUT or self._alive(token) is not True:
            return False
        if token not in self._logged:
            self._logged.add(token)
            logger.warning(
                "process %s of the crawl stopped beating but still runs on this machine "
                "(paused?): the requests it claimed stay with it for %.0f s, then go to the "
                "crawl's shared list all the same",
                token,
                PAUSED_PEER_TIMEOUT,
            )
        return True
