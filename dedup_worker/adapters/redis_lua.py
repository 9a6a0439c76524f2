"""Lua scripts of the Redis index (Redis 6.2+: EVALSHA, Lua 5.1 with ``struct``).

One script call works on one shard (one table, one coarse prefix): every key it touches shares
the shard's hash tag, so the call is atomic and lands in one Redis Cluster slot. A bucket is a
string of 16-byte records (fingerprint big-endian, id big-endian). Lua only does C-level
string work (find, sub, concatenation); Hamming distances are computed by the caller in numpy.

Buckets are rewritten whole (MSET, or SET EX with a ttl) instead of grown with APPEND: APPEND's
greedy preallocation measured ~37% more used_memory per bucket. Reads and writes are one MGET
and one MSET per call rather than one command per bucket, which cut script time by about a
third. Lua numbers are doubles, so no script does 64-bit arithmetic: records are compared as
byte strings.

Bucket keys are built in Lua from a prefix and suffixes rather than passed as KEYS: they share
KEYS[1]'s hash tag, hence its slot (Redis 7 allows undeclared keys of the declared slot), and
one KEYS entry per bucket made redis-py's pure-Python command packing a third of the client's
time. MGET reads a key of another type as missing; nothing but this index writes under its
prefix.
"""

from __future__ import annotations

#: Probe and (optionally) insert a batch's records of one shard, in batch order.
#:
#: KEYS[1]   the shard's counter key (records really inserted; kept for table 0 only)
#: ARGV[1]   mode: "q" query only, "p" probe then insert, "i" insert and reply only the count
#: ARGV[2]   ttl in seconds of written buckets, "0" for none
#: ARGV[3]   "1" to add the number of inserted records to KEYS[1], else "0"
#: ARGV[4]   the records, n x 16 bytes, in batch order
#: ARGV[5]   each record's bucket, n x 2 bytes big-endian, 0-based index into the buckets
#: ARGV[6]   the shard's bucket key prefix, e.g. "nd:{ns:ver:t0:p3}:b"
#: ARGV[7]   the m distinct buckets this call touches: key suffixes (hex), space-separated
#: ARGV[8]   optional: each record's kind, n bytes, "p" its entry's own, "q" a probe only (a
#:           flipped key's bucket: read, never written); absent, every record is its entry's own
#:
#: Returns {inserted, lens, sizes, buckets} ({inserted} in mode "i"): lens is n x 4 bytes
#: big-endian, the length of each record's bucket just before the record was considered; sizes
#: is m x 4 bytes, the final length of each bucket; buckets is their final contents concatenated.
#: Records are only ever appended within a call, so a record's view is a prefix of its bucket's
#: final content, which therefore travels once. Four reply items per call, however many
#: buckets, because redis-py parses each reply item in Python. A record whose exact 16 bytes are
#: already in its bucket (at a record boundary) is not stored again: replays are safe.
PROBE_INSERT = """
local mode, ttl, count = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local recs, idx, kinds = ARGV[4], ARGV[5], ARGV[8]
local keys = {}
for suffix in string.gmatch(ARGV[7], '%x+') do
  keys[#keys + 1] = ARGV[6] .. suffix
end
local m = #keys

local function present(s, rec)
  local init = 1
  while true do
    local p = string.find(s, rec, init, true)
    if not p then return false end
    if (p - 1) % 16 == 0 then return true end
    init = p + 1
  end
end

local data, dirty = {}, {}
for lo = 1, m, 1000 do
  local hi = math.min(m, lo + 999)
  local got = redis.call('MGET', unpack(keys, lo, hi))
  for j = lo, hi do
    data[j] = got[j - lo + 1] or ''
  end
end

local lens, inserted = {}, 0
for e = 1, #recs / 16 do
  local hi, lo = string.byte(idx, 2 * e - 1, 2 * e)
  local j = hi * 256 + lo + 1
  local s = data[j]
  lens[e] = #s
  if mode ~= 'q' and not (kinds and string.byte(kinds, e) == 113) then  -- 113: "q"
    local rec = string.sub(recs, 16 * e - 15, 16 * e)
    if #s == 0 or not present(s, rec) then
      data[j] = s .. rec
      dirty[j] = true
      inserted = inserted + 1
    end
  end
end

local writes = {}
for j = 1, m do
  if dirty[j] then
    if ttl > 0 then
      redis.call('SET', keys[j], data[j], 'EX', ttl)
    else
      writes[#writes + 1] = keys[j]
      writes[#writes + 1] = data[j]
      if #writes >= 1000 then
        redis.call('MSET', unpack(writes))
        writes = {}
      end
    end
  end
end
if #writes > 0 then
  redis.call('MSET', unpack(writes))
end
if count == '1' and inserted > 0 then
  redis.call('INCRBY', KEYS[1], inserted)
end

if mode == 'i' then
  return {inserted}
end
local function packed(values)  -- 4-byte big-endian integers, packed in slices of 1000
  local parts = {}
  for lo = 1, #values, 1000 do
    local hi = math.min(#values, lo + 999)
    parts[#parts + 1] = struct.pack(string.rep('>I4', hi - lo + 1), unpack(values, lo, hi))
  end
  return table.concat(parts)
end
local sizes = {}
for j = 1, m do
  sizes[j] = #data[j]
end
return {inserted, packed(lens), packed(sizes), table.concat(data)}
"""

#: Remove records of one shard.
#:
#: KEYS[1]   the shard's counter key
#: ARGV[1]   "1" to subtract the number of removed records from KEYS[1], else "0"
#: ARGV[2]   the records, n x 16 bytes
#: ARGV[3]   each record's bucket, n x 2 bytes big-endian, 0-based index into the buckets
#: ARGV[4]   the shard's bucket key prefix
#: ARGV[5]   the distinct buckets this call touches: key suffixes (hex), space-separated
#:
#: Returns the number of records removed. A bucket left empty is deleted; others keep their TTL.
DELETE = """
local count, recs, idx = ARGV[1], ARGV[2], ARGV[3]
local keys = {}
for suffix in string.gmatch(ARGV[5], '%x+') do
  keys[#keys + 1] = ARGV[4] .. suffix
end
local m = #keys

local function find(s, rec)
  local init = 1
  while true do
    local p = string.find(s, rec, init, true)
    if not p then return nil end
    if (p - 1) % 16 == 0 then return p end
    init = p + 1
  end
end

local data, dirty = {}, {}
for j = 1, m do
  data[j] = redis.call('GET', keys[j]) or ''
end

local removed = 0
for e = 1, #recs / 16 do
  local rec = string.sub(recs, 16 * e - 15, 16 * e)
  local hi, lo = string.byte(idx, 2 * e - 1, 2 * e)
  local j = hi * 256 + lo + 1
  local p = find(data[j], rec)
  if p then
    data[j] = string.sub(data[j], 1, p - 1) .. string.sub(data[j], p + 16)
    dirty[j] = true
    removed = removed + 1
  end
end

for j = 1, m do
  if dirty[j] then
    if #data[j] == 0 then
      redis.call('DEL', keys[j])
    else
      redis.call('SET', keys[j], data[j], 'KEEPTTL')
    end
  end
end
if count == '1' and removed > 0 then
  redis.call('DECRBY', KEYS[1], removed)
end
return removed
"""
