"""Real servers started locally: the embedded default (``neardup up``) and the test suite.

:class:`EmbeddedStack` runs one Tansu broker and one redis-server on loopback ports. The server
classes live in :mod:`neardup.servers` and are re-exported here, so callers need one import::

    with EmbeddedStack() as stack:
        run_pipeline(bootstrap=stack.bootstrap, redis_url=stack.redis_url)

Nothing here prints; progress goes to ``logging``. Every process is stopped on exit, also on
exceptions, on SIGTERM (when the stack may install its handler) and at interpreter exit.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import NoReturn, Self

from neardup.errors import StackError
from neardup.servers import (
    KafkaBroker,
    RedisCluster,
    RedisServer,
    free_port,
    live_processes,
    stop_all,
)
from neardup.servers.process import state_dir_for

__all__ = [
    "EmbeddedStack",
    "KafkaBroker",
    "RedisCluster",
    "RedisServer",
    "StackError",
    "free_port",
    "live_processes",
    "stop_all",
]

logger = logging.getLogger(__name__)


class EmbeddedStack:
    """One Tansu broker plus one redis-server, started together and always stopped together.

    ``state_dir`` gets ``kafka/`` and ``redis/`` subdirectories with each server's log; a
    temporary directory is used (and removed on close) when none is given. With
    ``handle_sigterm`` the stack turns SIGTERM into ``SystemExit`` while it runs, so ``with``
    blocks unwind and stop the servers; it does so only in the main thread and only when nobody
    else installed a SIGTERM handler.
    """

    def __init__(
        self,
        state_dir: Path | str | None = None,
        *,
        host: str = "127.0.0.1",
        kafka_port: int | None = None,
        redis_port: int | None = None,
        startup_timeout: float = 20.0,
        handle_sigterm: bool = True,
    ) -> None:
        self.state_dir, self._remove_dir = state_dir_for(self, state_dir, "neardup-stack-")
        self.kafka = KafkaBroker(
            self.state_dir / "kafka", port=kafka_port, host=host, startup_timeout=startup_timeout
        )
        self.redis = RedisServer(
            self.state_dir / "redis", port=redis_port, host=host, startup_timeout=startup_timeout
        )
        self._sigterm = _SigtermAsExit() if handle_sigterm else None

    @property
    def bootstrap(self) -> str:
        """Kafka ``bootstrap_servers``, e.g. ``127.0.0.1:41234``."""
        return self.kafka.bootstrap

    @property
    def redis_url(self) -> str:
        """e.g. ``redis://127.0.0.1:41235/0``."""
        return self.redis.url

    @property
    def pids(self) -> list[int]:
        """Pids of the running servers (for leak checks)."""
        return [pid for pid in (self.kafka.pid, self.redis.pid) if pid is not None]

    def start(self) -> Self:
        """Start the broker and redis; on any failure stop whatever already started."""
        if self._sigterm is not None:
            self._sigterm.install()
        try:
            self.kafka.start()
            self.redis.start()
        except BaseException:
            self.stop()
            raise
        logger.info("embedded stack up: kafka %s, redis %s", self.bootstrap, self.redis_url)
        return self

    def stop(self) -> None:
        """Stop both servers; the second is stopped even if stopping the first fails."""
        try:
            self.kafka.stop()
        finally:
            try:
                self.redis.stop()
            finally:
                if self._sigterm is not None:
                    self._sigterm.uninstall()

    def log_tail(self, lines: int = 20) -> str:
        """Both servers' log tails, for error reports."""
        return (
            f"--- tansu ({self.kafka.log_path}) ---\n{self.kafka.log_tail(lines)}\n"
            f"--- redis ({self.redis.log_path}) ---\n{self.redis.log_tail(lines)}"
        )

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


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> NoReturn:
    raise SystemExit(128 + signum)


class _SigtermAsExit:
    """Turns SIGTERM into SystemExit while installed; leaves other handlers alone.

    The default SIGTERM action ends Python without unwinding, so neither ``finally`` blocks nor
    ``atexit`` would stop the servers (only the Linux parent-death signal would).
    """

    def __init__(self) -> None:
        self._installed = False

    def install(self) -> None:
        if self._installed or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
        self._installed = True

    def uninstall(self) -> None:
        if not self._installed or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is _exit_on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        self._installed = False
