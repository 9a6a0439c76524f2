"""Worker slots: distinct, reusable transactional ids for workers started from one environment.

Kafka fences a transactional producer when another one initialises the same transactional id,
and aborts the transaction the older one left open. A worker's id must therefore be

- **the same as its dead predecessor's**, or something else must fence that predecessor: Tansu
  never times out an abandoned transaction, and ``read_committed`` readers wait behind it (Apache
  Kafka aborts it after ``transaction.timeout.ms``);
- **different from every live worker's**, or the two fence each other and one dies.

The rule: a worker without ``NEARDUP_WORKER_ID`` leases a *slot* in a table its whole group
shares (in Redis), the lowest one that is free or whose lease lapsed, and produces under the
transactional id ``<group>.slot-<n>``. It renews the lease every ``NEARDUP_LEASE_RENEW_MS``; a
lease not renewed for ``NEARDUP_LEASE_TTL_MS`` lapses but its entry stays, marking a slot whose
transaction may still be open. A live worker *claims* such a slot (a short lease of its own),
opens a transactional producer with its id, which aborts the dead transaction, and frees it. A
worker that stops cleanly frees its slot itself. So a dead worker's transaction stalls readers
for at most about TTL + renew interval (+ one producer initialisation), and a restarted worker
needs no memory of its old id.

A holder counts its lease from the moment it *sent* the renewal and stops producing one renew
interval before that lease could lapse, so no one takes a slot from a worker that still uses
it, unless that worker was paused (SIGSTOP, a stalled VM) past its lease. Then the broker's
fencing protects the data, and the worker, on resuming, finds its lease gone and takes another
slot (``dedup_worker.worker.identity``).

Lease time is the store's own clock (Redis ``TIME``), so the hosts' clocks need not agree.

This module is pure: the store's protocol and the rule every store follows, the holder's lease
arithmetic, and ``MemorySlotStore``, the reference implementation (unit tests, and the contract
suite that ``RedisSlotStore`` must pass too).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol


def slot_name(slot: int) -> str:
    """The worker id of a slot (the transactional id is ``<group>.<slot name>``)."""
    return f"slot-{slot}"


@dataclass(frozen=True)
class Taken:
    """A slot just leased; ``lapsed``: its previous holder's lease had lapsed, so a transaction
    of that holder may be open (the new holder's producer initialisation aborts it)."""

    slot: int
    lapsed: bool


@dataclass(frozen=True)
class Lease:
    """A slot's entry as the store sees it now."""

    owner: str
    lapsed: bool


class SlotStore(Protocol):
    """The shared slot table of one group; every method is one atomic step of the store."""

    @property
    def max_slots(self) -> int: ...

    def acquire(self, owner: str, ttl_ms: int) -> Taken | None:
        """Lease the lowest slot that is free or whose lease lapsed; None when all are held."""
        ...

    def renew(self, slot: int, owner: str, ttl_ms: int) -> bool:
        """Extend ``owner``'s lease of ``slot``, even a lapsed one nobody claimed since; False
        when the slot was taken over or freed (the owner must stop using its id)."""
        ...

    def claim_lapsed(self, owner: str, ttl_ms: int) -> int | None:
        """Lease the lowest slot whose lease lapsed, to fence it; None when there is none."""
        ...

    def release(self, slot: int, owner: str) -> bool:
        """Free ``slot`` if ``owner`` holds it: its transactional id has nothing open."""
        ...

    def leases(self) -> dict[int, Lease]:
        """Every slot's entry (diagnostics and tests)."""
        ...


# ---- the rule, shared by every store (Redis's Lua scripts implement the same) ----------------


def lapsed(expires_ms: int, now_ms: int) -> bool:
    return expires_ms <= now_ms


def slot_to_acquire(expiries: Mapping[int, int], now_ms: int, max_slots: int) -> Taken | None:
    """The lowest slot below ``max_slots`` that has no entry or a lapsed one."""
    for slot in range(max_slots):
        expires = expiries.get(slot)
        if expires is None or lapsed(expires, now_ms):
            return Taken(slot, expires is not None)
    return None


def slot_to_claim(expiries: Mapping[int, int], now_ms: int) -> int | None:
    """The lowest slot whose lease lapsed."""
    due = [slot for slot, expires in expiries.items() if lapsed(expires, now_ms)]
    return min(due, default=None)


# ---- the holder's view of its lease ------------------------------------------------------------


class LeaseStatus(enum.Enum):
    HELD = "held"  # renewed recently enough: may produce under the slot's id
    LAPSING = "lapsing"  # not renewed lately (store unreachable?): may not produce until it is
    LOST = "lost"  # the store says another worker took the slot, or it was freed


class HeldLease:
    """When the holder may produce, counted on its own monotonic clock from each renewal's
    *sending* (the store sets the expiry later than that, so the holder's view is the earlier
    one) minus one renew interval of margin."""

    def __init__(self, slot: int, ttl_s: float, renew_s: float, sent_at: float) -> None:
        self.slot = slot
        self._valid_s = ttl_s - renew_s
        self.renewed_at = sent_at
        self._lost = False

    def renewed(self, sent_at: float) -> None:
        self.renewed_at = max(self.renewed_at, sent_at)

    def lose(self) -> None:
        self._lost = True

    def valid_until(self) -> float:
        return self.renewed_at + self._valid_s

    def status(self, now: float) -> LeaseStatus:
        if self._lost:
            return LeaseStatus.LOST
        return LeaseStatus.HELD if now < self.valid_until() else LeaseStatus.LAPSING


# ---- the in-process store ------------------------------------------------------------------------


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class MemorySlotStore:
    """The reference ``SlotStore``: one process's table (unit tests; the contract's reference).
    ``clock_ms`` is injectable so tests can let leases lapse without waiting."""

    def __init__(self, max_slots: int, clock_ms: Callable[[], int] = _monotonic_ms) -> None:
        self._max_slots = max_slots
        self._clock_ms = clock_ms
        self._entries: dict[int, tuple[int, str]] = {}  # slot -> (expires_ms, owner)
        self._lock = threading.Lock()

    @property
    def max_slots(self) -> int:
        return self._max_slots

    def _expiries(self) -> dict[int, int]:
        return {slot: expires for slot, (expires, _) in self._entries.items()}

    def acquire(self, owner: str, ttl_ms: int) -> Taken | None:
        with self._lock:
            now = self._clock_ms()
            taken = slot_to_acquire(self._expiries(), now, self._max_slots)
            if taken is not None:
                self._entries[taken.slot] = (now + ttl_ms, owner)
            return taken

    def renew(self, slot: int, owner: str, ttl_ms: int) -> bool:
        with self._lock:
            entry = self._entries.get(slot)
            if entry is None or entry[1] != owner:
                return False
            self._entries[slot] = (self._clock_ms() + ttl_ms, owner)
            return True

    def claim_lapsed(self, owner: str, ttl_ms: int) -> int | None:
        with self._lock:
            now = self._clock_ms()
            slot = slot_to_claim(self._expiries(), now)
            if slot is not None:
                self._entries[slot] = (now + ttl_ms, owner)
            return slot

    def release(self, slot: int, owner: str) -> bool:
        with self._lock:
            entry = self._entries.get(slot)
            if entry is None or entry[1] != owner:
                return False
            del self._entries[slot]
            return True

    def leases(self) -> dict[int, Lease]:
        with self._lock:
            now = self._clock_ms()
            return {
                slot: Lease(owner, lapsed(expires, now))
                for slot, (expires, owner) in self._entries.items()
            }
