"""Work shared between the crawler processes of one crawl.

Every process of a crawl (same ``NEARDUP_CRAWL_ID`` and Redis) claims the links it finds in the
crawl's seen set, so no URL is fetched twice; but a process fetches only the links *its own*
pages release. Started with the same seeds, a second process found them claimed by the first
and closed at once, having fetched nothing. Sharing fixes that, as scrapy-redis's shared queue
does, without moving every request through Redis:

- each process beats its state every ``BEAT_EVERY`` seconds into the crawl's peer table:
  ``busy`` (it has requests or decisions to wait for) or ``hungry`` (idle, and the shared list
  was empty when it looked);
- a busy process that knows a hungry peer hands the links its decisions release over to the
  crawl's shared list, once it keeps ``KEEP_LOCAL`` requests of its own queued, at most
  ``GIVE_PER_BEAT`` a hungry peer per beat (its view of the table is as old as its last beat);
- a process whose ``max_pages`` budget is spent hands over every link it could not send while
  any peer is alive, hungry or not: a peer with places left takes them when it is idle (and
  what nobody takes stays in the list, claimed, for a resumed crawl, as ``JOBDIR`` keeps the
  links over a budget);
- an idle process takes up to ``TAKE_AT_ONCE`` requests from the shared list (no more than its
  ``max_pages`` budget has places for), and stays open while a peer beat ``busy`` within
  ``PEER_TIMEOUT`` (a peer that stopped beating, killed, is not waited for);
- a process never closes while the shared list holds requests: it takes them first.

A request handed over is claimed in the seen set already, so the process taking it fetches it
past the filter. Its page is published and decided by that process, as any page of its own.
What it no longer has: the giver's correction (its source page turned out a duplicate) does not
cancel it, and the giver's fetch-ahead and likely-duplicate checks do not see it queued. Both
only cost fetches, and only while a peer is hungry. A request whose ``meta`` is not JSON stays
with its process. Requests are JSON (``Request.to_dict``, headers and body as Latin-1 text),
never pickled: what Redis holds is not code.

The store (:class:`crawler.sharing_store.PeerStore`) is the crawl's peer table and shared list:
in memory for one process (the tests, a crawl without Redis), in Redis for a crawl
(:class:`crawler.sharing_redis.RedisPeerStore`); one contract suite runs on both.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scrapy.utils.request import request_from_dict

from crawler.peers_here import PausedPeers, alive_here, process_token
from crawler.sharing_store import Peer, PeerStore

logger = logging.getLogger(__name__)

BUSY = "busy"
HUNGRY = "hungry"
#: Seconds between two beats of a process (its view of its peers is as old).
BEAT_EVERY = 1.0
#: A peer whose last beat is older is gone (killed): nobody waits for it, and what its journal
#: holds goes to the shared list.
PEER_TIMEOUT = 30.0
#: A peer whose last beat is older has missed beats: maybe killed (a live one beats every
#: ``BEAT_EVERY`` while busy, and at every look while idle).
SILENT_AFTER = 3 * BEAT_EVERY
#: Requests a process keeps queued for itself before it hands links to a hungry peer.
KEEP_LOCAL = 16
#: Requests an idle process takes from the shared list at once.
TAKE_AT_ONCE = 64
#: Links handed over per hungry peer between two beats.
GIVE_PER_BEAT = TAKE_AT_ONCE
#: Seconds an idle process waits after finding the shared list empty before it looks again.
LOOK_EVERY = 0.2


class WorkSharing:
    """One process's side of the sharing (see the module docstring)."""

    def __init__(
        self,
        store: PeerStore,
        token: str | None = None,
        timer: Callable[[], float] = time.monotonic,
        fingerprint: Callable[[Any], bytes] | None = None,
        alive: Callable[[str], bool | None] = alive_here,
    ) -> None:
        """``fingerprint``: a request's seen-set fingerprint, when this process journals the
        requests it claims (its requests handed over leave the journal). ``alive``: whether a
        silent peer's process still runs on this machine (:mod:`crawler.peers_here`)."""
        self.store = store
        self.token = token or process_token()
        self.timer = timer  # this process's own intervals: no step back when the clock is set
        self.fingerprint = fingerprint
        self._paused = PausedPeers(alive)
        self._outbox_fps: list[bytes] = []
        self._beat_ok_at: float | None = None  # timer() of this process's last beat
        self._takes_over_from = 0.0  # timer() from which it takes silent peers over
        self._owing = False  # a silent peer's journal held requests at the last beat
        #: Requests of killed processes' journals this process moved to the shared list.
        self.taken_from_killed = 0
        self.state = BUSY
        self._beaten_at: float | None = None
        self._peers: dict[str, Peer] = {}
        self._may_give = 0  # links this process may still hand over before its next beat
        self._outbox: list[bytes] = []
        self._found_empty_at: float | None = None  # timer() of the last look at an empty list
        self._looked_since_beat = False  # the shared list was read after the last beat
        self.unreadable = 0  # shared requests this process could not decode (logged)

    # ---- beats --------------------------------------------------------------------------

    def due(self) -> bool:
        return self._beaten_at is None or self.timer() - self._beaten_at >= BEAT_EVERY

    def beat(self, state: str) -> None:
        """Record ``state`` (BUSY or HUNGRY) and refresh the view of the peers."""
        self.state, self._beaten_at = state, self.timer()
        self._looked_since_beat = False
        table = self.store.beat(self.token, state)
        # After a gap in this process's own beats as long (Redis out of reach for everyone),
        # every row has aged: live peers would be taken for dead and their requests fetched
        # twice. So it takes over only once it has beaten for PEER_TIMEOUT again, by when a
        # live peer has beaten too.
        now = self.timer()
        if self._beat_ok_at is None:
            self._takes_over_from = now
        elif now - self._beat_ok_at > PEER_TIMEOUT:
            self._takes_over_from = now + PEER_TIMEOUT
        self._beat_ok_at = now
        self._peers = {
            token: peer
            for token, peer in table.items()
            if token != self.token and peer.age <= PEER_TIMEOUT
        }
        self._may_give = GIVE_PER_BEAT * self.hungry_peers()
        self._owing = self._silent_peer_owes(table)
        if now < self._takes_over_from or self.fingerprint is None:
            return
        for token, peer in table.items():
            if (
                token != self.token
                and peer.age > PEER_TIMEOUT
                and not self._paused(token, peer.age)
            ):
                self._take_over(token)

    def _take_over(self, token: str) -> None:
        """A process that stopped beating was killed (one that stops leaves the table): what
        it had claimed and not sent goes to the shared list, for whichever process is idle."""
        moved = self.store.take_over(token, PEER_TIMEOUT, self.token, self.state)
        if moved > 0:
            self.taken_from_killed += moved
            self._found_empty_at = None
            logger.warning(
                "process %s of the crawl stopped beating (killed?): %d requests it had claimed "
                "and not sent go to the crawl's shared list",
                token,
                moved,
            )

    def hungry_peers(self) -> int:
        return sum(1 for peer in self._peers.values() if peer.state == HUNGRY)

    def peers_busy(self) -> bool:
        """A peer beat BUSY lately: it may still hand links over."""
        return any(peer.state == BUSY for peer in self._peers.values())

    def _peer_owes(self) -> bool:
        """As the last beat saw it (one look at the journals a beat, not one a look at the
        shared list)."""
        return self._owing

    def _silent_peer_owes(self, table: Mapping[str, Peer]) -> bool:
        """A peer that missed its beats and whose journal holds requests: killed (while idle,
        its last beat HUNGRY) with requests claimed; its journal is taken over once its beat
        ages out (``beat``), so wait for that; or paused on this machine, which keeps it a
        while longer (``crawler.peers_here``). A live idle peer beats at every look: however
        stale its journal, two idle processes never wait for each other."""
        if self.fingerprint is None:
            return False
        silent = [token for token, peer in self._peers.items() if peer.age > SILENT_AFTER]
        # Past PEER_TIMEOUT: a peer paused here (kept a while), or any, while this process
        # takes nobody over after a gap in its own beats: its journal is not taken yet.
        waiting = self.timer() < self._takes_over_from
        silent += [
            token
            for token, peer in table.items()
            if token != self.token
            and peer.age > PEER_TIMEOUT
            and (waiting or self._paused(token, peer.age))
        ]
        return any(self.store.owes(token) for token in silent)

    def leave(self, keep_journal: bool = False) -> None:
        """Out of the peer table (``keep_journal``: see :meth:`PeerStore.leave`)."""
        try:
            self.store.leave(self.token, keep_journal)
        finally:  # the store gives back what it took and did not use as it closes
            self.store.close()

    # ---- giving -------------------------------------------------------------------------

    def gives(self, queued: int, spent: bool = False) -> bool:
        """Whether the next released link goes to a hungry peer: this process has ``queued``
        requests of its own waiting, or its budget is ``spent`` (it could not send the link)."""
        if spent:  # to the crawl's shared list, for whichever peer has places left
            return bool(self._peers)
        return self._may_give > 0 and queued >= KEEP_LOCAL

    def hand_over(self, request: Any, spider: Any) -> bool:
        """Put ``request`` in the outbox (sent by :meth:`flush`); False: it stays here."""
        encoded = encode_request(request, spider)
        if encoded is None:
            return False
        self._outbox.append(encoded)
        if self.fingerprint is not None:
            self._outbox_fps.append(self.fingerprint(request))
        self._may_give -= 1
        return True

    def flush(self) -> int:
        """Send the outbox to the shared list (one round trip); how many went. If the store
        fails, the outbox is kept for the next flush: its links are claimed in the seen set and
        no longer queued here, so nobody else would fetch them."""
        out, self._outbox = self._outbox, []
        if out:
            try:
                self.store.push(out)
            except Exception:
                self._outbox = out + self._outbox
                raise
        self._forget_handed()
        return len(out)

    def _forget_handed(self) -> None:
        """The requests pushed leave this process's journal. If that fails they stay in it:
        taken over after a kill, such a request would be fetched twice, never lost."""
        fps, self._outbox_fps = self._outbox_fps, []
        try:
            self.store.forget(self.token, fps)
        except Exception as exc:
            logger.warning("%d requests handed over stay in this process's journal: %s",
                           len(fps), exc)  # fmt: skip

    # ---- taking -------------------------------------------------------------------------

    def take(self, room: int | None, spider: Any) -> list[Any]:
        """Up to ``room`` requests (None: ``TAKE_AT_ONCE``) from the shared list, as requests of
        ``spider``. An empty list is looked at again after ``LOOK_EVERY`` seconds at most."""
        count = TAKE_AT_ONCE if room is None else min(room, TAKE_AT_ONCE)
        now = self.timer()
        recent = self._found_empty_at is not None and now - self._found_empty_at < LOOK_EVERY
        if count <= 0 or recent:
            return []
        # Journaled as they are taken: a kill before _remember_taken loses none of them.
        taken = self.store.pop(count, self.token if self.fingerprint is not None else None)
        self._found_empty_at = None if taken else now
        self._looked_since_beat = True
        requests = []
        journaled: dict[bytes, bytes] = {}
        unfiled: list[bytes] = []  # journaled by the pop, never filed: dropped, or a copy
        for raw in taken:
            try:
                request = decode_request(raw, spider)
            except Exception:  # one bad entry (another spider's version?) must not cost the rest
                self.unreadable += 1
                logger.exception("dropping a shared request this spider cannot read: %.200r", raw)
                unfiled.append(raw)
                continue
            requests.append(request)
            if self.fingerprint is not None:
                fp = self.fingerprint(request)
                if fp in journaled and journaled[fp] != raw:
                    unfiled.append(journaled[fp])
                journaled[fp] = raw
        self._remember_taken(journaled)
        if unfiled and self.fingerprint is not None:
            self._forget_unfiled(unfiled)
        return requests

    def _forget_unfiled(self, unfiled: list[bytes]) -> None:
        """Out of the journal: what the pop journaled and this process will not send."""
        try:
            self.store.forget(self.token, unfiled)
        except Exception as exc:
            logger.warning("%d requests dropped stay in this process's journal: %s",
                           len(unfiled), exc)  # fmt: skip

    def journal_again(self, requests: Sequence[Any], spider: Any) -> None:
        """Requests this process claimed and settled before (a skip) that go out after all
        (fetched back): into its journal again, until their pages are decided."""
        if self.fingerprint is None:
            return
        encoded = ((self.fingerprint(r), encode_request(r, spider)) for r in requests)
        self._remember_taken({fp: raw for fp, raw in encoded if raw is not None})

    def _remember_taken(self, journaled: dict[bytes, bytes]) -> None:
        """What this process took is filed in its journal under its fingerprint now, until it
        goes out. If that fails, each stays there under itself (as the pop put it): taken
        over after a kill, it would be fetched again even if it had gone out, never lost."""
        if not journaled:
            return
        try:
            self.store.remember(self.token, journaled)
        except Exception as exc:
            logger.warning("%d requests taken are not filed in this process's journal: %s",
                           len(journaled), exc)  # fmt: skip

    def waits_for_peers(self, room: int | None) -> bool:
        """An idle process with nothing to take: whether it stays open, hungry, because a peer
        may still hand links over (never when its budget has no place left).

        A peer hands its last links over and then leaves. If the list was last looked at
        before the beat that shows no busy peer left, those links may have come in between:
        the process stays open for one more look, without waiting ``LOOK_EVERY``."""
        if room == 0:
            return False
        if self.state != HUNGRY or self.due():
            self.beat(HUNGRY)
        if self.peers_busy() or self._peer_owes():
            return True
        if not self._looked_since_beat:
            self._found_empty_at = None
            return True
        return False


def encode_request(request: Any, spider: Any) -> bytes | None:
    """``request`` as JSON (None: its callback is not the spider's, or its meta is not JSON)."""
    try:
        data: dict[str, Any] = request.to_dict(spider=spider)
    except ValueError:
        return None
    data["headers"] = {
        key.decode("latin-1"): [value.decode("latin-1") for value in values]
        for key, values in data.get("headers", {}).items()
    }
    data["body"] = data.get("body", b"").decode("latin-1")
    try:
        return json.dumps(data, separators=(",", ":")).encode()
    except (TypeError, ValueError):
        return None


def decode_request(raw: bytes, spider: Any) -> Any:
    data = json.loads(raw)
    data["headers"] = {
        key.encode("latin-1"): [value.encode("latin-1") for value in values]
        for key, values in data["headers"].items()
    }
    data["body"] = data["body"].encode("latin-1")
    return request_from_dict(data, spider=spider)
