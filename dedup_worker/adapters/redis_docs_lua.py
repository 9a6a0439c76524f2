"""Lua scripts of the Redis doc store (Redis 6.2+: EVALSHA, Lua 5.1 with ``bit``).

One call works on the records of one shard (see :mod:`redis_docs_codec` for keys and the
record encoding): KEYS[1] is the shard's ``:s`` key and routes the call to the shard's slot;
bucket keys are built here as prefix .. suffix, which shares KEYS[1]'s hash tag (the index
scripts do the same, to keep redis-py's command packing small). A call reads each
bucket it touches once and writes it back once (``finalize`` patches a same-size verdict in
place instead, see ``patch``); the call is atomic, so every check-then-write is too.

Lua numbers are doubles and Lua's ``<`` on strings follows the server's locale, so ids are
compared byte by byte as 8-byte big-endian strings, never as numbers.
"""

from __future__ import annotations

from dedup_worker.adapters.redis_docs_codec import (
    CORRECTED,
    HAS_DUP_ID,
    PENDING_CODE,
    SUPPRESSED_CODES,
)

_CONSTANTS = "\n".join(
    (
        f"local PENDING, HAS_DUP_ID, CORRECTED = {PENDING_CODE}, {HAS_DUP_ID}, {CORRECTED}",
        "local SUPPRESSED = {" + ", ".join(f"[{c}] = true" for c in SUPPRESSED_CODES) + "}",
    )
)

#: Helpers shared by the scripts: record walking, id comparison, one read/write per bucket.
#: Expects ``prefix`` (bucket key prefix) and ``ttl`` (seconds, 0 = none) to be set first
#: (by ``_ARGS``).
_PRELUDE = """
local function u16(s, i)
  local a, b = string.byte(s, i, i + 1)
  return a * 256 + b
end

local function p16(n)
  return string.char(math.floor(n / 256), n % 256)
end

-- Whether position p of bucket s starts a record (a walk over the headers: no allocation).
local function starts_record(s, p)
  local pos = 1
  while pos < p do pos = pos + 12 + u16(s, pos + 8) + u16(s, pos + 10) end
  return pos == p
end

-- The record with this 8-byte id in bucket s: its start and size, or nil. The id is searched
-- in C (plain string.find) and its position checked against the record boundaries; comparing
-- a string.sub per record allocated one Lua string each.
local function find(s, id)
  local init = 1
  while true do
    local p = string.find(s, id, init, true)
    if not p then return nil end
    if starts_record(s, p) then return p, 12 + u16(s, p + 8) + u16(s, p + 10) end
    init = p + 1
  end
end

-- The record of bucket s whose immutable part starts at position p, or nil.
local function record_at_immutable(s, p)
  local pos = 1
  while pos < p do
    local imm = pos + 12 + u16(s, pos + 8)
    if imm == p then return pos, imm - pos + u16(s, pos + 10) end
    pos = imm + u16(s, pos + 10)
  end
  return nil
end

-- a < b for 8-byte big-endian ids.
local function less(a, b)
  for i = 1, 8 do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end

local cache, dirty = {}, {}
local function load(suffix)
  local s = cache[suffix]
  if s == nil then
    s = redis.call('GET', prefix .. suffix) or ''
    cache[suffix] = s
  end
  return s
end

local function store(suffix, s)
  cache[suffix] = s
  dirty[suffix] = true
end

-- Overwrite bytes of a bucket in place, without copying it: same size, so no record moves.
-- The cached copy keeps the old bytes, which only that record's next rewrite would read (an id
-- comes once per call); a rewrite of another record of the bucket reads it again (fresh).
local patched = {}
local function patch(suffix, at, bytes)
  local key = prefix .. suffix
  redis.call('SETRANGE', key, at - 1, bytes)
  if ttl > 0 then redis.call('EXPIRE', key, ttl) end
  patched[suffix] = true
end

local function fresh(suffix)
  if patched[suffix] then
    patched[suffix] = nil
    cache[suffix] = nil
  end
  return load(suffix)
end

-- The latest record of the URL whose key (2-byte length, then the URL) is ``key`` in bucket s:
-- its start, id and size (nil when none). The key is searched in C, then checked to start a
-- record's immutable part.
local function latest_in(s, key)
  local init, best, best_id, best_size = 1, nil, nil, 0
  while true do
    local p = string.find(s, key, init, true)
    if not p then break end
    local pos, size = record_at_immutable(s, p)
    if pos then
      local id = string.sub(s, pos, pos + 7)
      if not best or less(best_id, id) then best, best_id, best_size = pos, id, size end
    end
    init = p + 1
  end
  return best, best_id, best_size
end

-- Store record rec in the bucket unless its id is there: false, or the record stored.
local function claim_one(suffix, rec)
  local s = load(suffix)
  local pos, stored = find(s, string.sub(rec, 1, 8))
  if pos then return string.sub(s, pos, pos + stored - 1) end
  store(suffix, s .. rec)
  return false
end

local function flush()
  for suffix in pairs(dirty) do
    if ttl > 0 then
      redis.call('SET', prefix .. suffix, cache[suffix], 'EX', ttl)
    else
      redis.call('SET', prefix .. suffix, cache[suffix])
    end
  end
end

-- Longest common prefix length of a and b (binary search on equal substrings).
local function common(a, b)
  local lo, hi = 0, math.min(#a, #b)
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if string.sub(a, 1, mid) == string.sub(b, 1, mid) then lo = mid else hi = mid - 1 end
  end
  return lo
end

-- Bucket s with the record at pos given a new mutable part: template, then the duplicate's
-- URL (when the template says so) as its common prefix with the record's URL and the rest.
local function rewrite(s, pos, template, dup_url)
  local imm = pos + 12 + u16(s, pos + 8)
  local mut = template
  if bit.band(string.byte(template, 1), 0x20) ~= 0 then
    local url = string.sub(s, imm + 2, imm + 1 + u16(s, imm))
    local same = common(url, dup_url)
    mut = mut .. p16(same) .. string.sub(dup_url, same + 1)
  end
  -- One concatenation: the record's immutable part runs on into the rest of the bucket.
  return string.sub(s, 1, pos + 7) .. p16(#mut) .. string.sub(s, pos + 10, pos + 11) .. mut
    .. string.sub(s, imm)
end
"""

#: Every script but POINT takes the same arguments and reads its entries in order:
#:
#: KEYS[1]   the shard's strays key (hash: URL key -> 8-byte id; routes the call to its slot)
#: ARGV[1]   ttl in seconds of written buckets, "0" for none
#: ARGV[2]   the shard's bucket key prefix, e.g. "nd:{ns:d3}:"
#: ARGV[3]   each entry's bucket key suffix (hex), space-separated
#: ARGV[4]   the entries, concatenated; each script documents its entry
#:
#: One blob instead of one argument per field: redis-py's per-argument packing was the
#: largest client cost of a batch.
_ARGS = """
local ttl, prefix, blob = tonumber(ARGV[1]), ARGV[2], ARGV[4]
local suffixes = {}
for suffix in string.gmatch(ARGV[3], '%x+') do suffixes[#suffixes + 1] = suffix end
"""


def _script(body: str) -> str:
    return _ARGS + _CONSTANTS + _PRELUDE + body


#: Store records whose id is new; return the stored record otherwise.
#:
#: Entry: an encoded record (self-delimiting: id 8, n_mut 2, n_imm 2, then n_mut + n_imm).
#: Returns, per record in order, false (stored) or the record already stored under its id.
CLAIM = _script(
    """
local out, at = {}, 1
for k = 1, #suffixes do
  local size = 12 + u16(blob, at + 8) + u16(blob, at + 10)
  out[k] = claim_one(suffixes[k], string.sub(blob, at, at + size - 1))
  at = at + size
end
flush()
return out
"""
)

#: Records by id.
#:
#: Entry: an 8-byte id. Returns, per id in order, the record or false.
GET = _script(
    """
local out = {}
for k = 1, #suffixes do
  local s = load(suffixes[k])
  local pos, size = find(s, string.sub(blob, 8 * k - 7, 8 * k))
  out[k] = pos and string.sub(s, pos, pos + size - 1) or false
end
return out
"""
)

#: The latest record of each URL: the highest id among the URL's bucket's records of that URL,
#: and the URL's stray pointer when it is higher still (the caller then fetches that id).
#:
#: Entry: a URL key (2-byte length, then the URL), with the URL's bucket suffix.
#: Returns two items per URL in order: the best record in the bucket or false, and the
#: stray id when it is higher than that record's id, else false.
LATEST = _script(
    """
local out, at = {}, 1
-- Stray records are rare (ids not made by page_id): most shards have no pointer at all, and
-- one EXISTS spares a lookup per URL.
local has_strays = redis.call('EXISTS', KEYS[1]) == 1
for k = 1, #suffixes do
  local key = string.sub(blob, at, at + 1 + u16(blob, at))
  at = at + #key
  local s = load(suffixes[k])
  local best, best_id, best_size = latest_in(s, key)
  local stray = has_strays and redis.call('HGET', KEYS[1], key)
  out[2 * k - 1] = best and string.sub(s, best, best + best_size - 1) or false
  out[2 * k] = (stray and (not best or less(best_id, stray))) and stray or false
end
return out
"""
)

#: ``LATEST`` of every record's URL, all taken before any record is claimed, then ``CLAIM``:
#: one call and one read of each bucket for the two steps every batch starts with. Only for
#: records whose id leads to their URL's bucket (page ids); the caller sends strays through
#: the two scripts.
#:
#: Entry: an encoded record, as for ``CLAIM`` (its immutable part starts with its URL key).
#: Returns three items per record in order: ``CLAIM``'s reply, then ``LATEST``'s two for its
#: URL.
CLAIM_LATEST = _script(
    """
local out, at, records = {}, 1, {}
local has_strays = redis.call('EXISTS', KEYS[1]) == 1
for k = 1, #suffixes do
  local n_mut = u16(blob, at + 8)
  local size = 12 + n_mut + u16(blob, at + 10)
  local rec = string.sub(blob, at, at + size - 1)
  at = at + size
  records[k] = rec
  local key = string.sub(rec, 13 + n_mut, 14 + n_mut + u16(rec, 13 + n_mut))
  local s = load(suffixes[k])
  local best, best_id, best_size = latest_in(s, key)
  local stray = has_strays and redis.call('HGET', KEYS[1], key)
  out[3 * k - 1] = best and string.sub(s, best, best + best_size - 1) or false
  out[3 * k] = (stray and (not best or less(best_id, stray))) and stray or false
end
for k = 1, #suffixes do out[3 * k - 2] = claim_one(suffixes[k], records[k]) end
flush()
return out
"""
)

#: Point URLs at stray records (ids without their URL's hash bits) unless a later one is there.
#:
#: KEYS[1]   the shard's strays key (hash: URL key -> 8-byte id)
#: ARGV[1]   ttl in seconds, "0" for none
#: ARGV[2..] pairs: URL key, 8-byte id
#:
#: Returns the number of pointers written.
POINT = """
local ttl, written = tonumber(ARGV[1]), 0
local function less(a, b)
  for i = 1, 8 do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end
for i = 2, #ARGV, 2 do
  local current = redis.call('HGET', KEYS[1], ARGV[i])
  if not current or less(current, ARGV[i + 1]) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    written = written + 1
  end
end
if written > 0 and ttl > 0 then redis.call('EXPIRE', KEYS[1], ttl) end
return written
"""

#: Compare-and-set pending -> verdict.
#:
#: Entry: id 8 | n_template 2 | n_url 2 | template (code, dup id, spelled-out verdict) |
#: the duplicate's URL (used only when the template's code has the 0x20 flag).
#: Returns per entry: "" (was pending, now set), the stored record (not pending), or false
#: (no such record).
FINALIZE = _script(
    """
local out, at = {}, 1
for k = 1, #suffixes do
  local id, nt, nu = string.sub(blob, at, at + 7), u16(blob, at + 8), u16(blob, at + 10)
  local template = string.sub(blob, at + 12, at + 11 + nt)
  local dup_url = string.sub(blob, at + 12 + nt, at + 11 + nt + nu)
  at = at + 12 + nt + nu
  local s = load(suffixes[k])
  local pos, size = find(s, id)
  if not pos then
    out[k] = false
  elseif string.byte(s, pos + 12) % 16 ~= PENDING then
    out[k] = string.sub(s, pos, pos + size - 1)
  elseif nt == 1 and u16(s, pos + 8) == 1 and bit.band(string.byte(template, 1), 0x20) == 0
      and not dirty[suffixes[k]] then
    -- The common case, a verdict without a duplicate: one code byte replaces another. (A
    -- bucket already rewritten in this call is written whole by flush, so it is not patched.)
    patch(suffixes[k], pos + 12, template)
    out[k] = ''
  else
    store(suffixes[k], rewrite(fresh(suffixes[k]), pos, template, dup_url))
    out[k] = ''
  end
end
flush()
return out
"""
)

#: Mark pages as duplicates where ``records.correction_applies``: the page is not suppressed,
#: or has no original id, or the new original is earlier than its current one. Reported as
#: ``records.correction_reported`` says (a page a correction had suppressed included), and a
#: page already suppressed with this very original is reported again
#: (``records.correction_repeats``).
#:
#: Entry: id 8 | original id 8 | n_template 2 | n_url 2 | template | the original's URL.
#: Returns one character per entry: "1" applied to a published (not suppressed, not pending)
#: record or to one a correction suppressed, or repeated, which needs a correcting decision;
#: "0" otherwise (absorbed, unchanged or missing).
CORRECT = _script(
    """
local out, at = {}, 1
for k = 1, #suffixes do
  local id, original = string.sub(blob, at, at + 7), string.sub(blob, at + 8, at + 15)
  local nt, nu = u16(blob, at + 16), u16(blob, at + 18)
  local template = string.sub(blob, at + 20, at + 19 + nt)
  local dup_url = string.sub(blob, at + 20 + nt, at + 19 + nt + nu)
  at = at + 20 + nt + nu
  local s = load(suffixes[k])
  local pos, size = find(s, id)
  out[k] = '0'
  if pos then
    local code = string.byte(s, pos + 12)
    local suppressed = SUPPRESSED[code % 16]
    local dup = bit.band(code, HAS_DUP_ID) ~= 0 and string.sub(s, pos + 13, pos + 20) or nil
    if not suppressed or not dup or less(original, dup) then
      local by_correction = bit.band(code, CORRECTED) ~= 0
      if (not suppressed and code % 16 ~= PENDING) or (suppressed and by_correction) then
        out[k] = '1'
      end
      store(suffixes[k], rewrite(s, pos, template, dup_url))
    elseif dup == original and bit.band(code, CORRECTED) ~= 0 then
      -- Applied before, maybe by a batch whose decisions were aborted: publish it again.
      out[k] = '1'
    end
  end
end
flush()
return table.concat(out)
"""
)

SCRIPTS = {
    "claim": CLAIM,
    "get": GET,
    "latest": LATEST,
    "claim_latest": CLAIM_LATEST,
    "point": POINT,
    "finalize": FINALIZE,
    "correct": CORRECT,
}
