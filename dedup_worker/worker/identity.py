"""Who this worker is to Kafka: the transactional id it produces under, and how it keeps it.

Three cases, decided by the configuration (``WorkerConfig.leased_identity``):

- ``NEARDUP_WORKER_ID`` set: that id, fixed (``FixedIdentity``); the operator keeps ids distinct.
- Redis configured, transactions possible: a slot leased in Redis (``SlotLease``; the rule and
  its reasons are in ``dedup_worker.core.slots``). A background thread renews the lease, another
  fences and frees the slots of workers that died.
- ``NEARDUP_REDIS_URL=memory`` (the index lives in the process, so one process by definition):
  the host name, fixed, and a lock file that refuses a second such worker on this host at
  start-up (it would fence the first and split the index). Without transactions the id only
  names the Kafka client.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from dedup_worker.core.slots import HeldLease, LeaseStatus, SlotStore, slot_name
from dedup_worker.errors import BackendUnavailable, ConfigError, NeardupError
from dedup_worker.worker.config import WorkerConfig, host_name, transactional_id

logger = logging.getLogger(__name__)


class Identity(Protocol):
    """What ``IdentifiedProducer`` needs to know about the id it produces under."""

    @property
    def transactional_id(self) -> str: ...

    def status(self) -> LeaseStatus: ...

    def lapse_detail(self) -> str:
        """Why the id may not be used now (status LAPSING), for log lines and errors."""
        ...

    def refresh(self) -> LeaseStatus:
        """The status after asking the store now (a lease renewal)."""
        ...

    def reacquire(self) -> str:
        """A new id after the old one was lost; raises BackendUnavailable to be retried."""
        ...

    def close(self, clean: bool) -> None:
        """Give the id up; ``clean``: no transaction of ours can be open under it."""
        ...


# ---- a fixed id ------------------------------------------------------------------------------


class FixedIdentity:
    """``NEARDUP_WORKER_ID`` or the host name: always held, never taken over."""

    def __init__(self, config: WorkerConfig, lock: HostLock | None = None) -> None:
        self._transactional_id = config.transactional_id
        self._lock = lock

    @property
    def transactional_id(self) -> str:
        return self._transactional_id

    def status(self) -> LeaseStatus:
        return LeaseStatus.HELD

    def lapse_detail(self) -> str:
        return "a fixed worker id never lapses"

    def refresh(self) -> LeaseStatus:
        return LeaseStatus.HELD

    def reacquire(self) -> str:
        raise AssertionError("a fixed worker id is never lost")

    def close(self, clean: bool) -> None:
        if self._lock is not None:
            self._lock.release()


class HostLock:
    """One memory-mode worker per broker, group and host: an exclusive ``flock`` on a file in
    the temporary directory, held for the life of the worker (the kernel drops it when the
    process dies, however it dies)."""

    def __init__(self, config: WorkerConfig) -> None:
        key = hashlib.sha256(f"{config.kafka_bootstrap}|{config.transactional_id}".encode())
        self.path = Path(tempfile.gettempdir()) / f"neardup-worker-{key.hexdigest()[:16]}.lock"
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ConfigError(
                f"another dedup-worker (pid {holder}) with NEARDUP_REDIS_URL=memory runs on this "
                f"host for group {config.group_id}: the memory backend keeps the index in the "
                "process, so it is one process only. Stop that worker, or set NEARDUP_REDIS_URL "
                "to a Redis shared by all workers to run several"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None


# ---- a leased slot ---------------------------------------------------------------------------


def owner_token() -> str:
    """Unique per process and start (host and pid only help a reader of the slot table)."""
    return f"{host_name()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class SlotLease:
    """This worker's slot in the group's table: taken by ``acquire``, renewed by a background
    thread, given up by ``close``. Another thread fences and frees lapsed slots (dead workers'):
    ``fence(transactional_id)`` initialises a producer with the id, which aborts what is open."""

    def __init__(
        self,
        store: SlotStore,
        config: WorkerConfig,
        fence: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._group = config.group_id
        self._ttl_ms = config.lease_ttl_ms
        self._renew_s = config.lease_renew_ms / 1000
        self._fence = fence
        self._clock = clock
        self.owner = owner_token()
        self._lock = threading.Lock()
        self._held: HeldLease | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._renew_failing = False
        # No fencing until then: after an outage of the store every lease lapsed, the live
        # ones included, so their holders get one ttl to renew before any of them is fenced.
        self._fence_after = float("-inf")

    # ---- the slot --------------------------------------------------------------------------

    @property
    def slot(self) -> int:
        if self._held is None:
            raise AssertionError("no slot acquired")
        return self._held.slot

    @property
    def transactional_id(self) -> str:
        return transactional_id(self._group, slot_name(self.slot))

    def acquire(self) -> None:
        """Lease a slot (start-up). ConfigError when every slot is held: a setting to fix."""
        if not self._take():
            raise ConfigError(
                f"all {self._store.max_slots} worker slots of group {self._group} are held by "
                "live workers: raise NEARDUP_WORKER_SLOTS, or set NEARDUP_WORKER_ID"
            )

    def _take(self) -> bool:
        sent = self._clock()
        taken = self._store.acquire(self.owner, self._ttl_ms)
        if taken is None:
            return False
        with self._lock:
            self._held = HeldLease(taken.slot, self._ttl_ms / 1000, self._renew_s, sent)
        logger.info(
            "took worker slot %d: transactional id %s%s",
            taken.slot,
            self.transactional_id,
            " (its previous holder's lease lapsed: opening the producer fences it)"
            if taken.lapsed
            else "",
        )
        return True

    def reacquire(self) -> str:
        if not self._take():
            raise BackendUnavailable(
                f"all {self._store.max_slots} worker slots of group {self._group} are held"
            )
        return self.transactional_id

    def status(self) -> LeaseStatus:
        with self._lock:
            if self._held is None:
                return LeaseStatus.LOST
            return self._held.status(self._clock())

    def lapse_detail(self) -> str:
        held = self._held
        if held is None:
            return "no worker slot held"
        return (
            f"the lease of worker slot {held.slot} was last renewed "
            f"{self._clock() - held.renewed_at:.1f} s ago, NEARDUP_LEASE_TTL_MS={self._ttl_ms}: "
            "is Redis reachable, or was this process paused?"
        )

    def refresh(self) -> LeaseStatus:
        """Renew now rather than at the next tick: LOST when the store says the slot is gone,
        LAPSING when it cannot say and our lease is past its time."""
        self._renew_once()
        return self.status()

    # ---- background threads ----------------------------------------------------------------

    def start(self) -> None:
        for name, loop in (("lease-renew", self._renew_loop), ("lease-fence", self._fence_loop)):
            thread = threading.Thread(target=loop, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _renew_loop(self) -> None:
        while not self._stop.wait(self._renew_s):
            self._renew_once()

    def _renew_once(self) -> bool:
        """One renewal; True when the store extended our lease."""
        held = self._held
        if held is None or held.status(self._clock()) is LeaseStatus.LOST:
            return False
        sent = self._clock()
        try:
            renewed = self._store.renew(held.slot, self.owner, self._ttl_ms)
        except NeardupError as exc:
            if not self._renew_failing:
                logger.warning("could not renew the lease of worker slot %d: %s", held.slot, exc)
            self._renew_failing = True
            self._fence_after = float("inf")
            return False
        if self._renew_failing and renewed:
            logger.info("renewed the lease of worker slot %d again", held.slot)
        if self._fence_after == float("inf"):
            self._fence_after = sent + self._ttl_ms / 1000
        self._renew_failing = False
        with self._lock:
            if held is not self._held:
                return False
            if renewed:
                held.renewed(sent)
            else:
                held.lose()
        if not renewed:
            logger.warning(
                "worker slot %d was taken over after its lease lapsed (%s); this worker stops "
                "producing under %s and takes another slot",
                held.slot,
                self.lapse_detail(),
                transactional_id(self._group, slot_name(held.slot)),
            )
        return renewed

    def _fence_loop(self) -> None:
        while True:
            try:
                while self._fence_one():
                    pass
            except NeardupError as exc:
                logger.warning("fencing lapsed worker slots: %s", exc)
            if self._stop.wait(self._renew_s):
                return

    def _fence_one(self) -> bool:
        """Claim the lowest lapsed slot, fence its id, free it; False when none lapsed (or
        this worker's own renewals failed within the last ttl, see ``_fence_after``)."""
        if self._clock() < self._fence_after:
            return False
        fencer = f"{self.owner}/fence"
        slot = self._store.claim_lapsed(fencer, self._ttl_ms)
        if slot is None:
            return False
        lapsed_id = transactional_id(self._group, slot_name(slot))
        logger.warning(
            "worker slot %d's lease lapsed (its worker died or stalled): fencing %s, which "
            "aborts the transaction it may have left open",
            slot,
            lapsed_id,
        )
        self._fence(lapsed_id)  # on failure the claim lapses and a worker fences it again
        self._store.release(slot, fencer)
        logger.info("fenced and freed worker slot %d", slot)
        return True

    def close(self, clean: bool) -> None:
        """Stop the threads; free the slot when nothing of ours can be open under its id,
        else leave it to lapse (and be fenced by a live worker)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        held = self._held
        if held is None or held.status(self._clock()) is LeaseStatus.LOST:
            return
        if not clean:
            logger.info("worker slot %d left to lapse: a transaction may be open", held.slot)
            return
        try:
            self._store.release(held.slot, self.owner)
        except NeardupError as exc:
            logger.warning("could not free worker slot %d (it will lapse): %s", held.slot, exc)
        else:
            logger.info("freed worker slot %d", held.slot)


# ---- the composition ---------------------------------------------------------------------------


def build_identity(config: WorkerConfig, fence: Callable[[str], None]) -> Identity:
    """The identity the configuration asks for; a leased one is acquired and renewing."""
    if not config.leased_identity:
        lock = HostLock(config) if config.memory_backend and config.transactional != "off" else None
        return FixedIdentity(config, lock)
    from dedup_worker.adapters.redis_client import connect
    from dedup_worker.adapters.redis_slots import RedisSlotStore

    client = connect(config.redis_url, cluster=config.redis_cluster, secured=config.redis_security)
    store = RedisSlotStore(client, config.index_namespace, config.group_id, config.worker_slots)
    lease = SlotLease(store, config, fence)
    lease.acquire()
    lease.start()
    return lease
