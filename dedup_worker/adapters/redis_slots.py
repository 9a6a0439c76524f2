"""The worker-slot table in Redis: one hash per group, each step one Lua script.

Key layout (``ns`` = the index namespace)::

    nd:{ns:workers}:<group>    hash: slot number -> "<expires ms> <owner>"

Everything between the braces is the Redis Cluster hash tag, so a group's table lives in one
slot and every script is atomic. Expiry is compared with the server's ``TIME`` inside the script
(Redis 5+ replicates a script's effects, so reading the clock before writing is allowed): the
workers' clocks never enter a lease. The rule is ``dedup_worker.core.slots``'s, which
``MemorySlotStore`` implements in Python; the contract tests run both.
"""

from __future__ import annotations

from typing import Any

from dedup_worker.adapters.redis_client import Client, describe, translated
from dedup_worker.core.slots import Lease, Taken

#: Shared head of every script: the server's time in ms and the entry helpers. An entry is
#: "<expires ms> <owner>"; an entry whose expiry is not after now has lapsed.
_PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function expires(entry)
  return tonumber(string.sub(entry, 1, string.find(entry, ' ', 1, true) - 1))
end
local function owner(entry)
  return string.sub(entry, string.find(entry, ' ', 1, true) + 1)
end
local function lease(ttl, who)
  return string.format('%.0f', now + tonumber(ttl)) .. ' ' .. who
end
"""

#: Lease the lowest slot that is free or whose lease lapsed.
#:
#: KEYS[1]   the group's slot hash
#: ARGV[1]   owner token, ARGV[2] lease ttl in ms, ARGV[3] number of slots
#:
#: Returns {slot, 1 if the slot's previous lease had lapsed else 0}, or {-1, 0} when all are held.
ACQUIRE = (
    _PRELUDE
    + """
for slot = 0, tonumber(ARGV[3]) - 1 do
  local entry = redis.call('HGET', KEYS[1], slot)
  if not entry or expires(entry) <= now then
    redis.call('HSET', KEYS[1], slot, lease(ARGV[2], ARGV[1]))
    if entry then return {slot, 1} end
    return {slot, 0}
  end
end
return {-1, 0}
"""
)

#: Extend a lease its owner still holds (even a lapsed one nobody claimed since).
#:
#: KEYS[1]   the group's slot hash
#: ARGV[1]   slot, ARGV[2] owner token, ARGV[3] lease ttl in ms
#:
#: Returns 1 if renewed, 0 if the slot has another owner or no entry.
RENEW = (
    _PRELUDE
    + """
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if entry and owner(entry) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], lease(ARGV[3], ARGV[2]))
  return 1
end
return 0
"""
)

#: Lease the lowest slot whose lease lapsed (its holder died or stalled), to fence it.
#:
#: KEYS[1]   the group's slot hash
#: ARGV[1]   owner token, ARGV[2] lease ttl in ms
#:
#: Returns the slot, or -1 when no lease has lapsed.
CLAIM_LAPSED = (
    _PRELUDE
    + """
local entries = redis.call('HGETALL', KEYS[1])
local best = nil
for i = 1, #entries, 2 do
  local slot = tonumber(entries[i])
  if expires(entries[i + 1]) <= now and (best == nil or slot < best) then best = slot end
end
if best == nil then return -1 end
redis.call('HSET', KEYS[1], best, lease(ARGV[2], ARGV[1]))
return best
"""
)

#: Free a slot its owner holds (nothing is left open under its transactional id).
#:
#: KEYS[1]   the group's slot hash
#: ARGV[1]   slot, ARGV[2] owner token
#:
#: Returns 1 if freed, 0 if the slot has another owner or no entry.
RELEASE = (
    _PRELUDE
    + """
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if entry and owner(entry) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0
"""
)

#: Every entry, with whether it lapsed.
#:
#: KEYS[1]   the group's slot hash
#:
#: Returns {slot, owner, lapsed (1/0), slot, owner, lapsed, ...}.
LEASES = (
    _PRELUDE
    + """
local entries = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #entries, 2 do
  out[#out + 1] = entries[i]
  out[#out + 1] = owner(entries[i + 1])
  out[#out + 1] = (expires(entries[i + 1]) <= now) and 1 or 0
end
return out
"""
)


def slots_key(namespace: str, group_id: str) -> str:
    return f"nd:{{{namespace}:workers}}:{group_id}"


class RedisSlotStore:
    """``SlotStore`` on one Redis or a Redis Cluster (the group's table is in one slot)."""

    def __init__(self, client: Client, namespace: str, group_id: str, max_slots: int) -> None:
        self._client = client
        self._url = describe(client)
        self._key = slots_key(namespace, group_id)
        self._max_slots = max_slots
        self._scripts = {
            name: client.register_script(source)
            for name, source in (
                ("acquire", ACQUIRE),
                ("renew", RENEW),
                ("claim", CLAIM_LAPSED),
                ("release", RELEASE),
                ("leases", LEASES),
            )
        }

    @property
    def max_slots(self) -> int:
        return self._max_slots

    def _run(self, name: str, *args: Any) -> Any:
        with translated(self._url):
            return self._scripts[name](keys=[self._key], args=list(args))

    def acquire(self, owner: str, ttl_ms: int) -> Taken | None:
        slot, was_lapsed = self._run("acquire", owner, ttl_ms, self._max_slots)
        return None if int(slot) < 0 else Taken(int(slot), bool(int(was_lapsed)))

    def renew(self, slot: int, owner: str, ttl_ms: int) -> bool:
        return bool(int(self._run("renew", slot, owner, ttl_ms)))

    def claim_lapsed(self, owner: str, ttl_ms: int) -> int | None:
        slot = int(self._run("claim", owner, ttl_ms))
        return None if slot < 0 else slot

    def release(self, slot: int, owner: str) -> bool:
        return bool(int(self._run("release", slot, owner)))

    def leases(self) -> dict[int, Lease]:
        flat = self._run("leases")
        return {
            int(flat[i]): Lease(_text(flat[i + 1]), bool(int(flat[i + 2])))
            for i in range(0, len(flat), 3)
        }


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
