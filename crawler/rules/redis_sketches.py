"""Page sketches in Redis, shared by a crawl's processes (see :mod:`crawler.rules.sketches`).

One string per page, ``neardup:crawl:{<crawl id>}:rules:sk:<tag>:<16 hex digits of the URL's
BLAKE2b>``, where the tag (e.g. ``s1b10x2``) names the sketch's format, so a crawler of another
sketch version resuming the crawl never reads these as its own. Each is set with an expiry of
``ttl`` seconds: a page is compared with its counterpart soon after one of them is fetched, and
a sketch outliving that only costs memory (~330 bytes a page). The hash tag puts them in the
crawl's cluster slot, so one MGET reads any two. Each write is one SET: nothing is checked
before it, so no script is needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from crawler.rules.redis_store import rules_prefix
from crawler.rules.sketches import PAGE_SKETCH
from crawler.rules.store import short_hash
from dedup_worker.adapters.redis_client import Client, check_binary, describe, translated
from dedup_worker.errors import ConfigError


class RedisSketchStore:
    """``SketchStore`` on Redis (single server or cluster). Thread-safe."""

    def __init__(self, client: Client, crawl_id: str, ttl: int) -> None:
        if ttl < 1:
            raise ConfigError(f"NEARDUP_RULE_SKETCH_TTL must be >= 1 second here, got {ttl}")
        check_binary(client)
        self._client = client
        self.url = describe(client)
        self.prefix = f"{rules_prefix(crawl_id)}sk:{PAGE_SKETCH.version_tag}:"
        self.ttl = ttl

    def key(self, url: str) -> str:
        return self.prefix + short_hash(url)

    def put_many(self, sketches: Mapping[str, bytes]) -> None:
        if not sketches:
            return
        with translated(self.url):
            pipe = self._client.pipeline(transaction=False)
            for url, sketch in sketches.items():
                pipe.set(self.key(url), sketch, ex=self.ttl)
            pipe.execute()

    def get_many(self, urls: Sequence[str]) -> list[bytes | None]:
        if not urls:
            return []
        with translated(self.url):
            found: list[bytes | None] = self._client.mget([self.key(url) for url in urls])  # type: ignore[assignment]
        return found

    def close(self) -> None:
        pass  # the client belongs to the caller
