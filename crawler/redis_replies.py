"""Calls to a crawl's Redis that change its state, made safe to send twice.

redis-py sends a command again when the connection drops before its reply arrives (its default
retry, which the crawler's stores keep so a blip does not fail a crawl). If the server had run
the command, the second run answered differently: a claim that had succeeded answered
"claimed by someone else", so nobody fetched the URL; a pop lost the requests it had taken;
a push added its requests twice. A store's own retry after an error (the link scheduler claims
a failed poll's links again at the next poll) had the same effect.

So every script that changes a crawl's state starts with :data:`REPLAY_PRELUDE`: its KEYS[1]
names the call (a fresh key per call, under the crawl's hash tag, so in the crawl's one
cluster slot), and its reply is kept there. A call sent again with the same key gets the kept
reply and changes nothing. :class:`Replies` names the calls, keeps the key of a call that
failed for its store to send again exactly, and has each kept reply deleted by the process's
next call once its answer came back; ``REPLY_TTL_S`` only bounds what a killed process leaves.
"""

from __future__ import annotations

import uuid
from typing import Any

import redis.exceptions as rex

from crawler.seen import check_crawl_id

#: Seconds a call's reply is kept at most (a process deletes it with its next call).
REPLY_TTL_S = 86_400
#: Hex digits that end a reply key (a uuid4's).
TOKEN_DIGITS = 32
#: The errors after which a call may have run (the connection failed, not the command): the
#: stores keep such a call to send it again. Any other error ran nothing.
MAY_HAVE_RUN = (rex.ConnectionError, rex.TimeoutError)

#: Requests (or claimed fingerprints with their requests) a crawl script takes per call: a
#: claim, a push, a take-over of a journal. Lua 5.1 hashes a long string from about 32 of its
#: characters: request JSONs that differ only in a few (numbered URLs: /product/1,
#: /product/2, ...) collide in its string table, so a script that holds many of them takes
#: time quadratic in their number (measured on redis-server 6.2: a journal of 30,000 such
#: requests took over in 2.4 s in one script, of 100,000 in 55 s; a claim of 30,000 links
#: with their requests 2.3 s), all that while Redis answers nobody else. A few hundred a
#: call keep each call within a few milliseconds.
SCRIPT_CHUNK = 256

#: The first lines of every state-changing script of a crawl.
#:
#: KEYS[1]   this call's reply key: the crawl's reply prefix and 32 hex digits
#: ARGV[1]   seconds the reply is kept
#: ARGV[2]   the hex digits of this process's calls whose replies came back, space-separated:
#:           their keys (the same prefix) are deleted. Only the digits travel, as a crawl id
#:           may hold spaces.
#:
#: A call whose reply key holds a reply returns it and does nothing else. Otherwise the script
#: goes on; it ends with ``return answer(reply)``, which keeps the reply and returns it. The
#: script's own keys and arguments start at KEYS[2] and ARGV[3].
REPLAY_PRELUDE = """
local reply_prefix = string.sub(KEYS[1], 1, -33)
for token in string.gmatch(ARGV[2], '%x+') do
  redis.call('DEL', reply_prefix .. token)
end
local kept = redis.call('GET', KEYS[1])
if kept then
  return cmsgpack.unpack(kept)
end
local function answer(reply)
  redis.call('SET', KEYS[1], cmsgpack.pack(reply), 'EX', ARGV[1])
  return reply
end
"""


def reply_prefix(crawl_id: str) -> str:
    """The prefix of the crawl's reply keys (its hash tag: the slot of its other keys)."""
    check_crawl_id(crawl_id)
    return f"neardup:crawl:{{{crawl_id}}}:reply:"


class Replies:
    """Reply keys for one store's calls (one process's, used from one thread)."""

    def __init__(self, crawl_id: str) -> None:
        self._prefix = reply_prefix(crawl_id)
        self._done: list[str] = []  # keys of calls answered, deleted with the next call

    def new_key(self) -> str:
        return self._prefix + uuid.uuid4().hex

    def call(self, script: Any, key: str, keys: list[str], args: list[Any]) -> Any:
        """Run ``script`` (a redis-py ``Script`` starting with :data:`REPLAY_PRELUDE`) as call
        ``key``. If it raises, the store keeps ``key`` to send the same call again."""
        done = " ".join(key[-TOKEN_DIGITS:] for key in self._done)
        reply = script(keys=[key, *keys], args=[REPLY_TTL_S, done, *args])
        self._done = []  # deleted by this call
        return reply

    def answered(self, *keys: str) -> None:
        """These calls' replies reached their caller (or are given up): never sent again, so
        their kept replies are deleted with the next call."""
        self._done.extend(keys)
