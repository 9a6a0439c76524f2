"""A slow, obviously-correct Python statement of fingerprint version 1 (the test oracle)."""

from __future__ import annotations

from dedup_worker.core.simhash import Document, FeatureConfig
from dedup_worker.core.text import prepare

MASK = (1 << 64) - 1
SEED = 0x9E3779B97F4A7C15
TOKEN_MUL = 0x100000001B3
SHINGLE_MUL = 0xD6E8FEB86659FD93


def fmix64(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK
    return h ^ (h >> 33)


def words(data: bytes) -> list[bytes]:
    out, current = [], bytearray()
    for byte in data:
        if byte >= 128 or chr(byte).isalnum():
            current.append(byte + 32 if 65 <= byte <= 90 else byte)
        elif current:
            out.append(bytes(current))
            current = bytearray()
    if current:
        out.append(bytes(current))
    return out


def word_hash(word: bytes) -> int:
    h = SEED
    for at in range(0, len(word), 8):
        chunk = int.from_bytes(word[at : at + 8], "little")
        h = ((h ^ chunk) * TOKEN_MUL) & MASK
    return fmix64(h ^ len(word))


def features(text: str, config: FeatureConfig) -> list[int]:
    stop = {word_hash(w) for w in words(prepare(" ".join(config.stop_words)))}
    hashes = [word_hash(w) for w in words(prepare(text))]
    if config.drop_stop_words:
        hashes = [h for h in hashes if h not in stop]
    if config.shingle == 1 or not hashes:
        return hashes
    # A text shorter than one shingle gives one shingle of all its words.
    size = min(config.shingle, len(hashes))
    out = []
    for i in range(len(hashes) - size + 1):
        h = size
        for j in range(size):
            h = ((h ^ hashes[i + j]) * SHINGLE_MUL) & MASK
        out.append(fmix64(h))
    return out


def votes(doc: Document, config: FeatureConfig) -> tuple[list[int], int]:
    """The weight voting for each bit, and the total weight."""
    parts = [(doc.text, 1)]
    if doc.title and config.title_weight:
        parts.append((doc.title, config.title_weight))
    if config.heading_weight:
        parts += [(h, config.heading_weight) for h in doc.headings]
    counts, total = [0] * 64, 0
    for text, weight in parts:
        for feature in features(text, config):
            total += weight
            for bit in range(64):
                if feature >> bit & 1:
                    counts[bit] += weight
    return counts, total


def simhash(doc: Document, config: FeatureConfig) -> int:
    counts, total = votes(doc, config)
    return sum(1 << bit for bit in range(64) if 2 * counts[bit] > total)


def margins(doc: Document, config: FeatureConfig) -> list[int]:
    """Each bit's distance from a tie: |2 x weight for 1 - total| (bit 0 first)."""
    counts, total = votes(doc, config)
    return [abs(2 * count - total) for count in counts]
