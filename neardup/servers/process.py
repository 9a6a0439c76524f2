"""One child server process: own process group, a log file, a clean stop, and no orphans.

Every server the project starts goes through :class:`ManagedProcess`, which gives three layers of
protection against leftovers: the owner's ``stop()``/context manager, an ``atexit`` hook for
everything still running when the interpreter exits, and (on Linux) ``PR_SET_PDEATHSIG`` so the
kernel kills the server even when the parent is killed with SIGKILL.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from neardup.errors import StackError

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_live: set[ManagedProcess] = set()
_live_lock = threading.Lock()


def state_dir_for(
    owner: object, state_dir: Path | str | None, prefix: str
) -> tuple[Path, Callable[[], object]]:
    """``state_dir``, or a new temporary directory plus the callable that removes it.

    The removal also runs when ``owner`` is garbage-collected or at interpreter exit, so
    temporary directories do not pile up when an owner is never closed.
    """
    if state_dir is not None:
        # Absolute: servers are started in (and chdir to) their directory, so a relative path
        # would be resolved twice.
        return Path(state_dir).resolve(), lambda: None
    path = Path(tempfile.mkdtemp(prefix=prefix))
    return path, weakref.finalize(owner, shutil.rmtree, path, ignore_errors=True)


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is unused on ``host`` right now.

    The port is not reserved: another process may take it before the server binds, so callers
    that chose the port this way retry with a fresh one when the bind fails.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds passed; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def package_binary(package: str, *parts: str) -> Path | None:
    """Path of an executable shipped inside an installed package, or None.

    Uses the import spec rather than importing the package, so finding a binary never runs the
    package's own start-up code.
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _load_prctl() -> Callable[..., int] | None:
    # Resolved in the parent: calling dlopen between fork and exec can deadlock when other
    # threads (librdkafka has several) held the loader lock at fork time.
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_prctl = _load_prctl()


def _die_with_parent() -> None:
    """Runs in the child before exec: the kernel SIGKILLs it when the parent thread dies."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ManagedProcess:
    """A server process in its own process group, with stdout and stderr appended to a log file.

    Its own group keeps a terminal Ctrl-C (sent to the foreground group) away from the server, so
    the parent decides when and how it stops; stopping signals the whole group, which also ends
    any helper the server forked (e.g. redis' background save).

    Caveat of the Linux parent-death signal: it fires when the *thread* that started the process
    exits, so start servers from a thread that outlives them (normally the main thread).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        cwd: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The server's pid while it has been started and not yet stopped."""
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        """True while the process runs (a paused process counts as running)."""
        return self._proc is not None and self.exit_status() is None

    def exit_status(self) -> int | None:
        """The exit status once the process has exited, else None; never reaps it.

        Not reaping keeps the pid (which is also the process-group id) reserved until ``stop``,
        so signalling the group can never hit an unrelated process that reused the pid.
        """
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return None if proc is None else proc.returncode
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped behind our back: gone all the same
            return -1
        return None if info is None else info.si_status

    def start(self) -> None:
        """Start the process; its output goes to ``log_path``, appended across restarts."""
        if self.alive():
            raise StackError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        try:
            self._proc = self._spawn(self._log)
        except OSError as exc:
            self._close_log()
            raise StackError(f"cannot start {self.name} ({self.argv[0]}): {exc}") from exc
        _register(self)
        logger.debug("started %s pid=%d: %s", self.name, self._proc.pid, " ".join(self.argv))

    def _spawn(self, log: IO[bytes]) -> subprocess.Popen[bytes]:
        env = {**os.environ, **self.env} if self.env is not None else None
        # preexec_fn only calls the preloaded prctl: no import, no lock a dead thread could hold.
        return subprocess.Popen(
            self.argv,
            cwd=self.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if _prctl is not None else None,  # noqa: PLW1509
        )

    def listens_on(self, port: int) -> bool:
        """True when this process (not some other one) has a TCP socket listening on ``port``."""
        return self._proc is not None and self.alive() and pid_listens_on(self._proc.pid, port)

    def send_signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the whole process group (no-op once the process has exited)."""
        if self._proc is not None and self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, sig)

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM the group, SIGKILL it after ``timeout`` seconds; always reap the process."""
        proc = self._proc
        if proc is None:
            return
        try:
            if self.alive():
                # A SIGSTOPped process would leave SIGTERM pending forever.
                self.send_signal(signal.SIGCONT)
                self.send_signal(signal.SIGTERM)
                if not wait_until(lambda: not self.alive(), timeout, interval=0.01):
                    logger.warning("%s did not stop in %.1fs; killing it", self.name, timeout)
            if proc.returncode is None:
                # The leader is unreaped here, so its pid (= the group id) cannot have been
                # reused: killing the group only hits this server and its leftovers.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            logger.debug("stopped %s pid=%d rc=%s", self.name, proc.pid, proc.returncode)
        finally:
            self._proc = None
            self._close_log()
            _unregister(self)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log file; '' when there is none."""
        return read_tail(self.log_path, lines)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def pid_listens_on(pid: int, port: int) -> bool:
    """True when ``pid`` owns a TCP socket in LISTEN state on ``port`` (any address).

    A successful connect or PING proves that *something* serves the port, possibly an older
    server that won the port: only the socket's owner proves it is ours. Linux only; elsewhere
    (no /proc) this cannot be checked and answers True.
    """
    if not Path("/proc/net/tcp").exists():
        return True
    inodes = _listen_inodes(port)
    try:
        links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:  # exited meanwhile, or an fd closed while we looked
        return False
    return any(f"socket:[{inode}]" in links for inode in inodes)


def _listen_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            next(rows, None)  # header
            for row in rows:
                fields = row.split()
                # fields: sl, local "ADDR:PORT" (hex), remote, state (0A = LISTEN), ..., inode
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    return inodes


def read_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, decoded leniently; '' when it does not exist."""
    try:
        with path.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 64 * 1024))
            data = log.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def failure_message(what: str, proc: ManagedProcess, detail: str) -> str:
    """An error message for a failed start: what, why, and the tail of the server's log."""
    tail = proc.log_tail() or "(empty log)"
    return f"{what}: {detail}\n--- last lines of {proc.log_path} ---\n{tail}"


def _register(proc: ManagedProcess) -> None:
    with _live_lock:
        _live.add(proc)


def _unregister(proc: ManagedProcess) -> None:
    with _live_lock:
        _live.discard(proc)


def live_processes() -> list[ManagedProcess]:
    """Every server started through this module and not stopped yet."""
    with _live_lock:
        return list(_live)


def stop_all(timeout: float = 2.0) -> None:
    """Stop every live server; the interpreter runs this at exit as the last line of defence."""
    for proc in live_processes():
        try:
            proc.stop(timeout)
        except Exception:  # one failure must not leave the other servers running
            logger.exception("could not stop %s", proc.name)


atexit.register(stop_all)
