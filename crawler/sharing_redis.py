"""The crawl's peer table and shared list in Redis (:class:`RedisPeerStore`), for
:mod:`crawler.sharing`: a hash ``neardup:crawl:{<id>}:crawlers`` (process token -> ``state
seconds``, the server's ``TIME`` of its last beat) and a list ``neardup:crawl:{<id>}:shared``
of JSON requests. Both carry the crawl id as hash tag, as its seen sets do: one slot, so one
server of a cluster serves all of a crawl's keys. Each operation is one command or script, so
no check-then-insert spans two; LPOP with a count (Redis >= 6.2) hands each request to one
taker. Beats are timed and aged by the server's clock: crawler processes on machines whose
clocks disagree still see each other's beats at their true age. A push or pop sent twice (its
reply lost) runs once: see :mod:`crawler.redis_replies`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Self

from crawler.redis_replies import MAY_HAVE_RUN, REPLAY_PRELUDE, SCRIPT_CHUNK, Replies
from crawler.seen import check_crawl_id, seen_key
from crawler.sharing_store import Peer
from dedup_worker.adapters.redis_client import (
    Client,
    RedisSecurity,
    check_binary,
    connect,
    describe,
    translated,
)
from dedup_worker.errors import NeardupError

logger = logging.getLogger(__name__)

#: Take over a killed process's journal, a chunk a call: the requests it claimed and had not
#: sent, and those it sent whose page was not decided yet (their outlinks were in its memory
#: only). Each one still claimed goes to the shared list, where any process of the crawl takes
#: it.
#:
#: KEYS[1]   the crawl's peer table
#: KEYS[2]   the shared list
#: KEYS[3]   the dead process's journal (hash: fingerprint -> request; a request it took from
#:           the shared list and had not filed under its fingerprint yet: request -> itself)
#: KEYS[4]   the crawl's seen set (an entry un-claimed since is left out)
#: KEYS[5]   the journal being taken over (the journal renamed, same hash tag)
#: ARGV[1]   the dead process's token
#: ARGV[2]   seconds without a beat after which a process is dead
#: ARGV[3]   "1" for the first call of a take-over, else "0"
#: ARGV[4]   how many entries to move at most (HSCAN's COUNT)
#: ARGV[5]   the HSCAN cursor the previous call returned ("0" to start)
#: ARGV[6]   (optional) the taker's token, ARGV[7] its state: each call is a beat of the taker
#:           too, so a long take-over (a large journal, a slow link) does not age it out
#:
#: The first call checks the death at the server's time (another process may have taken it
#: over, or the process beat again); every call marks the row "taking <now>", so nobody takes
#: it for dead while the calls go on, and a later call stops if the process beat again. A taker
#: killed in between leaves the row to age out: the next take-over goes on with what is left.
#: The last call deletes the row. Returns {status, moved, cursor}: status -1 (not dead, or not
#: in the table: left, or taken over already; nothing done), 0 (call again with the cursor),
#: 1 (done).
TAKE_OVER_SCRIPT = """
local row = redis.call('HGET', KEYS[1], ARGV[1])
if not row then
  return {-1, 0, '0'}
end
local t = redis.call('TIME')
local now = t[1] + t[2] / 1e6
if ARGV[6] and ARGV[6] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[6], string.format('%s %d.%06d', ARGV[7], t[1], t[2]))
end
if ARGV[3] == '1' then
  local at = tonumber(string.match(row, ' (.*)$') or '')
  if at and now - at <= tonumber(ARGV[2]) then
    return {-1, 0, '0'}
  end
elseif string.sub(row, 1, 7) ~= 'taking ' then
  return {-1, 0, '0'}
end
if redis.call('EXISTS', KEYS[5]) == 0 then
  if redis.call('EXISTS', KEYS[3]) == 0 then
    redis.call('HDEL', KEYS[1], ARGV[1])
    return {1, 0, '0'}
  end
  redis.call('RENAME', KEYS[3], KEYS[5])
end
local scan = redis.call('HSCAN', KEYS[5], ARGV[5], 'COUNT', ARGV[4])
local entries, moved = scan[2], {}
for i = 1, #entries, 2 do
  if entries[i] == entries[i + 1] or redis.call('SISMEMBER', KEYS[4], entries[i]) == 1 then
    moved[#moved + 1] = entries[i + 1]
  end
  redis.call('HDEL', KEYS[5], entries[i])
end
if #moved > 0 then
  redis.call('RPUSH', KEYS[2], unpack(moved))
end
if scan[1] == '0' and redis.call('EXISTS', KEYS[5]) == 0 and redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return {1, #moved, '0'}
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('taking %d.%06d', t[1], t[2]))
return {0, #moved, scan[1]}
"""

#: Record a process's state at the server's time; every process's state and age.
#:
#: KEYS[1]   the crawl's peer table (hash: token -> "state seconds")
#: ARGV[1]   this process's token
#: ARGV[2]   its state ("busy" / "hungry")
#:
#: Returns {now, token1, value1, token2, value2, ...}: the server's time (seconds, as text) and
#: the table as HGETALL gives it. TIME before a write is allowed: scripts replicate their
#: effects (the default since Redis 5).
BEAT_SCRIPT = """
local t = redis.call('TIME')
local now = string.format('%d.%06d', t[1], t[2])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. now)
local reply = redis.call('HGETALL', KEYS[1])
table.insert(reply, 1, now)
return reply
"""

#: Append requests to the shared list (after :data:`~crawler.redis_replies.REPLAY_PRELUDE`:
#: KEYS[1], ARGV[1..2]). KEYS[2] the list; ARGV[3..] the requests. Returns the list's length.
PUSH_SCRIPT = (
    REPLAY_PRELUDE
    + """
local length = redis.call('LLEN', KEYS[2])
for lo = 3, #ARGV, 1000 do
  length = redis.call('RPUSH', KEYS[2], unpack(ARGV, lo, math.min(#ARGV, lo + 999)))
end
return answer(length)
"""
)

#: Take requests from the front of the shared list (after the prelude). KEYS[2] the list;
#: ARGV[3] how many at most; KEYS[3] (optional) the taker's journal, where each request goes
#: in the same step (request -> itself, until :data:`REMEMBER_SCRIPT` files it under its
#: fingerprint, which only the crawler computes): a process killed as the reply comes back
#: leaves them to be taken over. Returns them (none: an empty list).
POP_SCRIPT = (
    REPLAY_PRELUDE
    + """
local taken = redis.call('LPOP', KEYS[2], ARGV[3]) or {}
if KEYS[3] then
  for _, request in ipairs(taken) do
    redis.call('HSET', KEYS[3], request, request)
  end
end
return answer(taken)
"""
)

#: File requests in a process's journal under their fingerprints.
#:
#: KEYS[1]   the journal
#: ARGV      fingerprint, request, fingerprint, request, ...
#:
#: A request's entry under itself (written as it was taken: :data:`POP_SCRIPT`) goes in the
#: same step; a fingerprint is shorter than any request, so the two never meet.
REMEMBER_SCRIPT = """
for i = 1, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('HDEL', KEYS[1], ARGV[i + 1])
end
return #ARGV / 2
"""

#: Put requests back at the front of the shared list, in their order (after the prelude).
#: KEYS[2] the list; ARGV[3..] the requests; KEYS[3] (optional) the journal they were taken
#: into, which they leave. Returns the list's length.
GIVE_BACK_SCRIPT = (
    REPLAY_PRELUDE
    + """
local length = redis.call('LLEN', KEYS[2])
for i = #ARGV, 3, -1 do
  length = redis.call('LPUSH', KEYS[2], ARGV[i])
  if KEYS[3] then
    redis.call('HDEL', KEYS[3], ARGV[i])
  end
end
return answer(length)
"""
)


#: A journal a process kept as it left (for a ``JOBDIR`` resume) becomes another's.
#: KEYS[1] the journal kept, KEYS[2] the journal of the process taking it up (none yet).
#: Returns how many requests it held (0: none, or adopted already); -1 if KEYS[2] exists.
ADOPT_SCRIPT = """
local n = redis.call('HLEN', KEYS[1])
if n == 0 then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
redis.call('RENAME', KEYS[1], KEYS[2])
return n
"""


def peers_key(crawl_id: str) -> str:
    check_crawl_id(crawl_id)
    return f"neardup:crawl:{{{crawl_id}}}:crawlers"


def shared_key(crawl_id: str) -> str:
    check_crawl_id(crawl_id)
    return f"neardup:crawl:{{{crawl_id}}}:shared"


def journal_key(crawl_id: str, token: str) -> str:
    """A process's journal of the requests it claimed and has not sent (same hash tag)."""
    check_crawl_id(crawl_id)
    return f"neardup:crawl:{{{crawl_id}}}:owed:{token}"


def taken_over_key(journal: str) -> str:
    """Where a journal goes while a take-over moves it to the shared list (same hash tag)."""
    return f"{journal}:taking"


class RedisPeerStore:
    """The peer table and shared list of one crawl (see the module docstring)."""

    def __init__(self, client: Client, crawl_id: str) -> None:
        check_binary(client)
        self._client = client
        self.url = describe(client)
        self.crawl_id = crawl_id
        self.peers_key = peers_key(crawl_id)
        self.shared_key = shared_key(crawl_id)
        self._seen_key = seen_key(crawl_id)
        self._take_over = client.register_script(TAKE_OVER_SCRIPT)
        self._beat = client.register_script(BEAT_SCRIPT)
        self._push = client.register_script(PUSH_SCRIPT)
        self._pop = client.register_script(POP_SCRIPT)
        self._give_back = client.register_script(GIVE_BACK_SCRIPT)
        self._remember = client.register_script(REMEMBER_SCRIPT)
        self._adopt = client.register_script(ADOPT_SCRIPT)
        self._journal: list[str] = []  # the journal the pops take into, if any (one process)
        self._replies = Replies(crawl_id)
        # The calls of a push that raised, (reply key, requests) each: sent again, exactly,
        # when the requests come again (``Sharing.flush`` sends its outbox again, in order).
        self._unpushed: list[tuple[str, list[bytes]]] = []
        self._unpopped: str | None = None  # the reply key of a pop that raised
        self._extra: list[bytes] = []  # taken by a pop sent again beyond what was asked

    @classmethod
    def from_url(
        cls, url: str, crawl_id: str, secured: RedisSecurity | None = None, *, cluster: bool = False
    ) -> Self:
        client = connect(url, cluster=cluster, secured=secured, fail_fast=False)
        with translated(describe(client)):
            client.ping()
        return cls(client, crawl_id)

    def beat(self, token: str, state: str) -> dict[str, Peer]:
        with translated(self.url):
            reply = self._beat(keys=[self.peers_key], args=[token, state])
        now = float(_text(reply[0]))
        pairs = zip(reply[1::2], reply[2::2], strict=True)
        return {_text(token): _peer(value, now) for token, value in pairs}

    def leave(self, token: str, keep_journal: bool = False) -> None:
        """Out of the table, and its journal gone: a process leaving has handed over, or
        un-claimed, what it owed; or, ``keep_journal``, kept for a ``JOBDIR`` resume to adopt
        (what Scrapy's queue and the resume file hold is still claimed by the crawl)."""
        journal = journal_key(self.crawl_id, token)
        with translated(self.url):
            pipe = self._client.pipeline(transaction=False)
            pipe.hdel(self.peers_key, token)
            if not keep_journal:
                pipe.delete(journal)
            pipe.delete(taken_over_key(journal))  # what a take-over left when it beat again
            pipe.execute()

    def hand_back(self, left_by: str) -> None:
        # A row beaten at time 0: the next beat of any process takes the journal over.
        with translated(self.url):
            self._client.hsetnx(self.peers_key, left_by, "busy 0.000000")

    def adopt(self, token: str, left_by: str) -> int:
        keys = [journal_key(self.crawl_id, left_by), journal_key(self.crawl_id, token)]
        with translated(self.url):
            adopted = int(self._adopt(keys=keys))
        if adopted < 0:
            raise NeardupError(f"{keys[1]} exists: a journal is adopted before any claim")
        return adopted

    def take_over(self, token: str, timeout: float, taker: str = "", state: str = "") -> int:
        journal = journal_key(self.crawl_id, token)
        keys = [self.peers_key, self.shared_key, journal, self._seen_key, taken_over_key(journal)]
        moved, first, cursor = 0, "1", "0"
        with translated(self.url):
            while True:
                args: list[str | float] = [token, timeout, first, SCRIPT_CHUNK, cursor]
                args += [taker, state]
                status, count, cursor = self._take_over(keys=keys, args=args)
                if int(status) < 0:
                    return moved if first == "0" else -1
                moved += int(count)
                if int(status) == 1:
                    return moved
                first, cursor = "0", _text(cursor)

    def forget(self, token: str, fingerprints: Sequence[bytes]) -> None:
        if fingerprints:
            with translated(self.url):
                self._client.hdel(journal_key(self.crawl_id, token), *fingerprints)

    def owes(self, token: str) -> int:
        journal = journal_key(self.crawl_id, token)
        with translated(self.url):
            pipe = self._client.pipeline(transaction=False)
            pipe.hlen(journal)
            pipe.hlen(taken_over_key(journal))  # a take-over whose taker was killed
            return sum(int(n) for n in pipe.execute())

    def remember(self, token: str, requests: Mapping[bytes, bytes]) -> None:
        if requests:
            with translated(self.url):
                fields = [value for pair in requests.items() for value in pair]
                self._remember(keys=[journal_key(self.crawl_id, token)], args=fields)

    def push(self, requests: Sequence[bytes]) -> None:
        """Append ``requests``, once each however often a call is sent again: a push that
        raised (the server may have run it) is sent again as the same calls when its requests
        come first in the next push; any other requests go as new calls, ``SCRIPT_CHUNK`` a
        call."""
        rest = list(requests)
        calls, self._unpushed = self._unpushed, []
        for at, (key, items) in enumerate(calls):
            if rest[: len(items)] != items:
                self._replies.answered(*(key for key, _ in calls[at:]))  # not coming again
                del calls[at:]
                break
            rest = rest[len(items) :]
        for lo in range(0, len(rest), SCRIPT_CHUNK):  # a stop hands a whole queue over
            calls.append((self._replies.new_key(), rest[lo : lo + SCRIPT_CHUNK]))
        with translated(self.url):
            try:
                for key, items in calls:
                    self._replies.call(self._push, key, [self.shared_key], items)
            except Exception:  # sent again, the calls that ran answer from their kept replies
                self._unpushed = calls
                raise
        self._replies.answered(*(key for key, _ in calls))

    def pop(self, count: int, token: str | None = None) -> list[bytes]:
        """Up to ``count`` requests, into ``token``'s journal if given. A pop whose connection
        failed is sent again as the same call (if the server ran it, the requests it took come
        back; taken anew, they were lost); what it took beyond ``count`` comes with the next
        pops, or goes back as the store closes."""
        if count <= 0:
            return []
        if self._extra:
            taken, self._extra = self._extra[:count], self._extra[count:]
            return taken
        key, self._unpopped = self._unpopped or self._replies.new_key(), None
        journal = [journal_key(self.crawl_id, token)] if token is not None else []
        if journal:  # kept for close()'s give-back (its own pop, a resend, has no token)
            self._journal = journal
        with translated(self.url):
            try:
                keys = [self.shared_key, *journal]
                reply = self._replies.call(self._pop, key, keys, [count])
            except MAY_HAVE_RUN:
                self._unpopped = key
                raise
        self._replies.answered(key)
        items = [item if isinstance(item, bytes) else item.encode() for item in reply]
        self._extra = items[count:]
        return items[:count]

    def close(self) -> None:
        """What this process took and did not use goes back to the front of the list: a pop
        whose connection failed and was never sent again, and what a resent pop brought
        beyond what was asked."""
        try:
            if self._unpopped is not None:  # resent, it takes its own count, not this one
                kept, self._extra = self._extra, []
                first = self.pop(1)
                self._extra = kept + first + self._extra
            if self._extra:
                key = self._replies.new_key()
                with translated(self.url):
                    keys = [self.shared_key, *self._journal]
                    self._replies.call(self._give_back, key, keys, self._extra)
                self._extra = []
        except NeardupError as exc:
            logger.warning("%d requests taken from the shared list are lost: %s",
                           len(self._extra), exc)  # fmt: skip
        finally:
            self._client.close()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _peer(value: bytes | str, now: float) -> Peer:
    state, _, at = _text(value).partition(" ")
    try:
        return Peer(state, now - float(at))
    except ValueError:  # written by something else: a peer that never counts
        return Peer(state, float("inf"))
