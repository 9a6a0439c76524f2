"""Lua scripts of the crawl's URL-seen set in Redis, for :mod:`crawler.seen_redis` (kept apart
from the store's round trips, as :mod:`dedup_worker.adapters.redis_lua` holds the index's): each
a named constant with the KEYS and ARGV it takes.

The scripts that claim and un-claim work on a crawl's seen set (with its in-flight and wanted
sets, and the process's journal), whose keys share the crawl's hash tag: each call is atomic
and lands in one Redis Cluster slot. Each starts with
:data:`~crawler.redis_replies.REPLAY_PRELUDE`, so a call sent twice runs once.
:data:`MOVE_LEGACY_SCRIPT`, the start-up move of a crawl's sets from their untagged names, is
the exception: single Redis only, and run again it finds nothing left to move.
"""

from __future__ import annotations

from crawler.redis_replies import REPLAY_PRELUDE

#: Claim outlinks (after :data:`~crawler.redis_replies.REPLAY_PRELUDE`: KEYS[1], ARGV[1..2]).
#:
#: KEYS[2]   the seen set
#: KEYS[3]   the in-flight set
#: KEYS[4]   the wanted set (all three share one hash tag: one slot)
#: ARGV[3]   n
#: ARGV[4..n+3]  fingerprints of outlinks that went out (they leave KEYS[3] and KEYS[4])
#: ARGV[n+4..]   fingerprints to claim
#: KEYS[5]   (optional) this process's journal (hash). Then ARGV[4] is s, the count of
#:           fingerprints after the n sent ones whose requests are settled (a page whose
#:           decision came, a request that will never be a page): they leave the journal;
#:           and the fingerprints to claim are followed by as many requests, each journaled
#:           under its fingerprint if this call claims it (an empty one is not)
#:
#: Returns per claim 1 if this call claimed it (now in flight), else 0; the fingerprint is
#: marked wanted if it is still in flight.
CLAIM_SCRIPT = (
    REPLAY_PRELUDE
    + """
local seen, inflight, wanted, journal = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local done, settled, first = tonumber(ARGV[3]), 0, 4
if journal then
  settled, first = tonumber(ARGV[4]), 5
end
for i = first, first + done - 1 do
  redis.call('SREM', inflight, ARGV[i])
  redis.call('SREM', wanted, ARGV[i])
end
for i = first + done, first + done + settled - 1 do
  redis.call('HDEL', journal, ARGV[i])
end
local start = first + done + settled
local last = #ARGV
if journal then
  last = start - 1 + (#ARGV - start + 1) / 2
end
local out = {}
for i = start, last do
  local fp = ARGV[i]
  if redis.call('SADD', seen, fp) == 1 then
    redis.call('SADD', inflight, fp)
    if journal and #ARGV[i + last - start + 1] > 0 then
      redis.call('HSET', journal, fp, ARGV[i + last - start + 1])
    end
    out[#out + 1] = 1
  else
    if redis.call('SISMEMBER', inflight, fp) == 1 then
      redis.call('SADD', wanted, fp)
    end
    out[#out + 1] = 0
  end
end
return answer(out)
"""
)

#: Claim fingerprints (after the prelude). KEYS[2] the seen set; ARGV[3..] the fingerprints.
#: KEYS[3] (optional) this process's journal: then the fingerprints are followed by as many
#: requests, each journaled if this call claims its fingerprint (an empty one is not).
#: Returns per fingerprint 1 if this call added it, else 0 (one listed twice: 1, then 0).
ADD_SCRIPT = (
    REPLAY_PRELUDE
    + """
local journal, last = KEYS[3], #ARGV
if journal then
  last = 2 + (#ARGV - 2) / 2
end
local out = {}
for i = 3, last do
  local added = redis.call('SADD', KEYS[2], ARGV[i])
  if added == 1 and journal and #ARGV[i + last - 2] > 0 then
    redis.call('HSET', journal, ARGV[i], ARGV[i + last - 2])
  end
  out[#out + 1] = added
end
return answer(out)
"""
)

#: Un-claim a cancelled outlink unless wanted (after the prelude). KEYS[2..4] as
#: CLAIM_SCRIPT's; ARGV[3] its fingerprint; KEYS[5] (optional) this process's journal. It
#: leaves the in-flight set; if it was wanted elsewhere it stays claimed (0: fetch it), else it
#: is un-claimed (1) and leaves the journal: claimed again by another process, it is that
#: one's, and a take-over of this one's journal after a kill would fetch it twice.
RELEASE_UNWANTED_SCRIPT = (
    REPLAY_PRELUDE
    + """
redis.call('SREM', KEYS[3], ARGV[3])
if redis.call('SREM', KEYS[4], ARGV[3]) == 1 then
  return answer(0)
end
redis.call('SREM', KEYS[2], ARGV[3])
if KEYS[5] then
  redis.call('HDEL', KEYS[5], ARGV[3])
end
return answer(1)
"""
)

#: Un-claim a fingerprint, whatever its marks (after the prelude). KEYS[2..4] as
#: CLAIM_SCRIPT's; ARGV[3] the fingerprint; KEYS[5] (optional) this process's journal, which
#: it leaves (as with RELEASE_UNWANTED_SCRIPT). Returns 1 if it was claimed. Sent twice as
#: plain SREMs, the second run could undo another process's claim made in between.
REMOVE_SCRIPT = (
    REPLAY_PRELUDE
    + """
redis.call('SREM', KEYS[3], ARGV[3])
redis.call('SREM', KEYS[4], ARGV[3])
if KEYS[5] then
  redis.call('HDEL', KEYS[5], ARGV[3])
end
return answer(redis.call('SREM', KEYS[2], ARGV[3]))
"""
)

#: KEYS[1..3] the seen, in-flight and wanted sets of a crawl under the untagged names of earlier
#: releases, KEYS[4..6] the same sets under their tagged names; no ARGV. Renames each legacy
#: set whose tagged name is free, so a crawl started before the upgrade resumes with its set.
#: Single Redis only (the names span slots; the cluster never had the untagged layout working).
#: Returns how many sets were moved.
MOVE_LEGACY_SCRIPT = """
local moved = 0
for i = 1, 3 do
  if redis.call('EXISTS', KEYS[i]) == 1 and redis.call('EXISTS', KEYS[i + 3]) == 0 then
    redis.call('RENAME', KEYS[i], KEYS[i + 3])
    moved = moved + 1
  end
end
return moved
"""
