"""The crawl's peer table and shared list of requests, as :mod:`crawler.sharing` sees them:
the :class:`PeerStore` contract, the :class:`Peer` rows it answers with, and
:class:`MemoryPeerStore`, the store of one process (the tests, a crawl without Redis). The
crawl's store is :class:`crawler.sharing_redis.RedisPeerStore`; one contract suite
(``tests/contract/test_peer_store_contract.py``) runs on both. Kept apart from the sharing
itself, so the Redis store depends on the contract only.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Peer:
    state: str
    age: float  # seconds since its last beat, by the store's clock (one clock for all machines)


class PeerStore(Protocol):
    """The crawl's peer table and shared list of requests."""

    def beat(self, token: str, state: str) -> dict[str, Peer]:
        """Record this process's state; every process's last beat, this one's included, aged
        by the store's own clock (Redis's ``TIME``), so the machines' clocks need not agree."""

    def leave(self, token: str, keep_journal: bool = False) -> None:
        """This process is done: out of the table, its journal gone or, ``keep_journal``,
        kept for the process that resumes its ``JOBDIR`` (:meth:`adopt`)."""

    def adopt(self, token: str, left_by: str) -> int:
        """The journal ``left_by`` kept as it left becomes ``token``'s (which has journaled
        nothing yet): how many requests it held (0: none, or adopted already)."""

    def hand_back(self, left_by: str) -> None:
        """The journal ``left_by`` kept as it left goes to the crawl instead: taken over (to
        the shared list) as a killed process's is, at the next beat of any process."""

    def push(self, requests: Sequence[bytes]) -> None:
        """Append requests to the shared list."""

    def pop(self, count: int, token: str | None = None) -> list[bytes]:
        """Take up to ``count`` requests from the front of the shared list (atomically: two
        processes never take the same one); with ``token``, into that process's journal in
        the same step, each under itself until :meth:`remember` files it."""

    def take_over(self, token: str, timeout: float, taker: str = "", state: str = "") -> int:
        """If ``token`` has not beaten for ``timeout`` seconds (checked again, atomically): the
        requests of its journal still in flight go to the shared list, its journal and its row
        go; how many went (-1: it is alive). ``taker`` (with its ``state``) beats as it goes."""

    def forget(self, token: str, fingerprints: Sequence[bytes]) -> None:
        """Out of ``token``'s journal: requests handed over (the shared list holds them)."""

    def remember(self, token: str, requests: Mapping[bytes, bytes]) -> None:
        """Into ``token``'s journal: requests it took from the shared list (fingerprint ->
        request), until they go out; each one's entry under itself (:meth:`pop`) goes."""

    def owes(self, token: str) -> int:
        """How many requests ``token``'s journal holds."""

    def close(self) -> None: ...


class MemoryPeerStore:
    """One process's table and list (a crawl without Redis has no peers)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.peers: dict[str, tuple[str, float]] = {}  # token -> (state, time of its beat)
        self.shared: deque[bytes] = deque()

    def beat(self, token: str, state: str) -> dict[str, Peer]:
        now = self.clock()
        self.peers[token] = (state, now)
        return {token: Peer(state, now - at) for token, (state, at) in self.peers.items()}

    def leave(self, token: str, keep_journal: bool = False) -> None:
        self.peers.pop(token, None)

    def adopt(self, token: str, left_by: str) -> int:
        return 0

    def hand_back(self, left_by: str) -> None:
        pass

    def push(self, requests: Sequence[bytes]) -> None:
        self.shared.extend(requests)

    def pop(self, count: int, token: str | None = None) -> list[bytes]:
        return [self.shared.popleft() for _ in range(min(count, len(self.shared)))]

    def take_over(self, token: str, timeout: float, taker: str = "", state: str = "") -> int:
        """No journals in memory (nobody claims for a process here but itself)."""
        row = self.peers.get(token)
        if row is None or self.clock() - row[1] <= timeout:
            return -1
        del self.peers[token]
        return 0

    def forget(self, token: str, fingerprints: Sequence[bytes]) -> None:
        pass

    def remember(self, token: str, requests: Mapping[bytes, bytes]) -> None:
        pass

    def owes(self, token: str) -> int:
        return 0

    def close(self) -> None:
        pass
