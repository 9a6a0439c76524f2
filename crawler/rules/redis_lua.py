"""Lua scripts of the Redis rule store (Redis 6.2+).

Every key of a crawl's rules shares the hash tag ``{<crawl id>}`` (one Redis Cluster slot), so
one script call can read and write all of them atomically. KEYS[1] is the crawl's rule-key hash
and routes the call; the other keys are built here from the prefix in ARGV[1] (same slot):

    <prefix>keys       hash   rule id -> rule key
    <prefix>s:<id>     hash   st (c/a/d), s (successes), f (failures), r (last outcomes, bit 0
                              newest, 1 = failure), sv (fetches saved)
    <prefix>o:<id>     set    observation ids already counted (a decision seen twice counts once)
    <prefix>v:<id>     set    distinct values of successful checks (any-value parameter rules)
    <prefix>p:<id>     set    distinct paths of successful checks
    <prefix>active     set    ids of active rules
    <prefix>log        list   "<state><rule key>" per rule created or changed state

The state machine mirrors :func:`crawler.rules.policy.next_state`, the Wilson bound
:func:`crawler.rules.policy.wilson_lower_bound` operation for operation; the policy numbers come
in ARGV, so they are defined once, in Python.
"""

from __future__ import annotations

#: Count observations, one after the other, each an atomic check-then-update.
#:
#: KEYS[1]   the crawl's rule-key hash (<prefix>keys)
#: ARGV[1]   key prefix, e.g. "neardup:crawl:{c1}:rules:"
#: ARGV[2..8] policy: z, activate_at, min_paths, min_values, window, window_failures,
#:           diversity_cap
#: ARGV[9..] 7 per observation: rule id, rule key, observation id, "1" success / "0" failure,
#:           value hash ("" unless the rule needs values), path hash, "1" if the rule needs
#:           distinct values
#:
#: Returns per observation {state, successes, failures, recent, values, paths, saved}. A dropped
#: rule counts nothing more (see :mod:`crawler.rules.store`).
RECORD = """
local P = ARGV[1]
local z, activate_at = tonumber(ARGV[2]), tonumber(ARGV[3])
local min_paths, min_values = tonumber(ARGV[4]), tonumber(ARGV[5])
local window, window_failures = tonumber(ARGV[6]), tonumber(ARGV[7])
local cap = tonumber(ARGV[8])
local span = 2 ^ window

local function wilson(s, checks)
  if checks <= 0 then return 0 end
  local n = checks
  local p = s / n
  local z2 = z * z
  local centre = p + z2 / (2 * n)
  local margin = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
  return (centre - margin) / (1 + z2 / n)
end

local function failures_in(recent)
  local count = 0
  while recent > 0 do
    count = count + recent % 2
    recent = (recent - recent % 2) / 2
  end
  return count
end

local function next_state(state, s, f, recent, values, paths, needs_values)
  if state == 'd' or failures_in(recent) >= window_failures then return 'd' end
  if state == 'c' and paths >= min_paths and (needs_values ~= '1' or values >= min_values)
      and wilson(s, s + f) >= activate_at then
    return 'a'
  end
  return state
end

local function add_capped(key, member)
  if redis.call('SCARD', key) < cap then redis.call('SADD', key, member) end
end

local out = {}
for i = 9, #ARGV, 7 do
  local id, rule_key, obs, ok = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local value, path, needs_values = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
  local stats = P .. 's:' .. id
  local state = redis.call('HGET', stats, 'st')
  if not state then
    state = 'c'
    redis.call('HSET', KEYS[1], id, rule_key)
    redis.call('HSET', stats, 'st', 'c', 's', 0, 'f', 0, 'r', 0, 'sv', 0)
    redis.call('RPUSH', P .. 'log', 'c' .. rule_key)
  end
  if state ~= 'd' and redis.call('SADD', P .. 'o:' .. id, obs) == 1 then
    local recent = tonumber(redis.call('HGET', stats, 'r'))
    if ok == '1' then
      redis.call('HINCRBY', stats, 's', 1)
      recent = (recent * 2) % span
      if needs_values == '1' then add_capped(P .. 'v:' .. id, value) end
      add_capped(P .. 'p:' .. id, path)
    else
      redis.call('HINCRBY', stats, 'f', 1)
      recent = (recent * 2 + 1) % span
    end
    redis.call('HSET', stats, 'r', recent)
  end
  local got = redis.call('HMGET', stats, 's', 'f', 'r', 'sv')
  local s, f, r, sv = tonumber(got[1]), tonumber(got[2]), tonumber(got[3]), tonumber(got[4])
  local values = redis.call('SCARD', P .. 'v:' .. id)
  local paths = redis.call('SCARD', P .. 'p:' .. id)
  local new = next_state(state, s, f, r, values, paths, needs_values)
  if new ~= state then
    redis.call('HSET', stats, 'st', new)
    if new == 'a' then
      redis.call('SADD', P .. 'active', id)
    else
      redis.call('SREM', P .. 'active', id)
    end
    redis.call('RPUSH', P .. 'log', new .. rule_key)
  end
  out[#out + 1] = {new, s, f, r, values, paths, sv}
end
return out
"""

#: The changes since a cursor, and every active rule's status.
#:
#: KEYS[1]   the crawl's rule-key hash
#: ARGV[1]   key prefix
#: ARGV[2]   cursor: log entries the caller has read
#: ARGV[3]   at most this many log entries
#:
#: Returns {cursor after, log length, reset, entries, active}: reset is 1 when the log is
#: shorter than the cursor (the data was lost; entries then start at 0); active is a flat list
#: of rule key, state, successes, failures, recent, values, paths, saved per active rule.
SYNC = """
local P = ARGV[1]
local cursor, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local length = redis.call('LLEN', P .. 'log')
local reset = 0
if cursor > length then
  cursor, reset = 0, 1
end
local entries = redis.call('LRANGE', P .. 'log', cursor, cursor + limit - 1)
local active = {}
for _, id in ipairs(redis.call('SMEMBERS', P .. 'active')) do
  local got = redis.call('HMGET', P .. 's:' .. id, 'st', 's', 'f', 'r', 'sv')
  active[#active + 1] = redis.call('HGET', KEYS[1], id)
  active[#active + 1] = got[1]
  active[#active + 1] = tonumber(got[2])
  active[#active + 1] = tonumber(got[3])
  active[#active + 1] = tonumber(got[4])
  active[#active + 1] = redis.call('SCARD', P .. 'v:' .. id)
  active[#active + 1] = redis.call('SCARD', P .. 'p:' .. id)
  active[#active + 1] = tonumber(got[5])
end
return {cursor + #entries, length, reset, entries, active}
"""

#: Count fetches saved by rules' predictions (unknown rules are ignored).
#:
#: KEYS[1]   the crawl's rule-key hash
#: ARGV[1]   key prefix
#: ARGV[2..] pairs: rule id, count
#:
#: Returns the number of rules counted.
ADD_SAVED = """
local P = ARGV[1]
local counted = 0
for i = 2, #ARGV, 2 do
  local stats = P .. 's:' .. ARGV[i]
  if redis.call('EXISTS', stats) == 1 then
    redis.call('HINCRBY', stats, 'sv', ARGV[i + 1])
    counted = counted + 1
  end
end
return counted
"""
