"""One member of a consumer group at a time leaves the group (a turn held in Redis).

Tansu 0.6.0, the embedded broker, wedges a group for good when its leader leaves before it has
rejoined after another member left: the departed leader stays named as the group's leader,
every later join is told to wait for its assignment, and no member, old or new, ever gets a
partition again, until the broker restarts (``Inner<Forming>::leave`` keeps ``state.leader``;
only a missed heartbeat of a current member clears it). Workers stopped together (the end of a
crawl, a scale-down) did exactly that whenever the follower's leave reached the broker first.
With a turn, each leaver waits for the one before it to be gone, and then keeps polling long
enough for the group to have formed again without it (see ``PageConsumer.close``).

Key: ``nd:{ns:workers}:<group>:leave`` (the slot table's hash tag: one Cluster slot), holding
the leaver's token, with a TTL, so a worker that dies holding the turn delays the others by
the TTL at most.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dedup_worker.adapters.redis_client import Client, describe, translated
from dedup_worker.errors import NeardupError

logger = logging.getLogger(__name__)

#: Give the turn back only if it is still ours (it may have lapsed and gone to another).
#:
#: KEYS[1]   the group's turn key
#: ARGV[1]   our token
#:
#: Returns 1 if the key was ours and is deleted, else 0.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def leave_turn_key(namespace: str, group_id: str) -> str:
    return f"nd:{{{namespace}:workers}}:{group_id}:leave"


class RedisLeaveTurn:
    """``with turn(poll): ...``: waits (calling ``poll``) until no other member of the group is
    leaving, holds the turn for the block, gives it back. Never blocks a stop for good: after
    ``wait_s`` the member leaves anyway (logged)."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        group_id: str,
        ttl_ms: int = 30_000,
        wait_s: float = 60.0,
    ) -> None:
        self.client = client
        self.key = leave_turn_key(namespace, group_id)
        self.ttl_ms = ttl_ms
        self.wait_s = wait_s
        self._release = client.register_script(RELEASE)

    @contextmanager
    def __call__(self, poll: Callable[[], None]) -> Iterator[None]:
        token = uuid.uuid4().hex
        started = time.monotonic()
        held = self._take(token)
        while held is False and time.monotonic() - started < self.wait_s:
            poll()  # keep heartbeating: this member takes part in the rebalance of the leaver
            held = self._take(token)
        waited = time.monotonic() - started
        if held is False:
            logger.warning("leaving the group without a turn after waiting %.0f s", waited)
        elif held and waited > 0.5:
            logger.info("waited %.1f s for the members leaving before this one", waited)
        try:
            yield
        finally:
            if held:
                self._give_back(token)

    def _take(self, token: str) -> bool | None:
        """True: the turn is ours; False: another member's; None: Redis failed (leave anyway:
        a stop never fails for want of a turn)."""
        try:
            with translated(describe(self.client)):
                return bool(self.client.set(self.key, token, nx=True, px=self.ttl_ms))
        except NeardupError as exc:
            logger.warning("leaving the group without a turn: %s", exc)
            return None

    def _give_back(self, token: str) -> None:
        try:
            with translated(describe(self.client)):
                self._release(keys=[self.key], args=[token])
        except NeardupError as exc:  # it lapses after its TTL
            logger.warning("could not give the leave turn back: %s", exc)
