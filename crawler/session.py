"""What the neardup components of one crawler share: one :class:`NeardupSession` per crawler.

Scrapy builds each component on its own (``from_crawler``); the spider middleware, the page
pipeline, the scheduling extension, the dupefilter and the download handler of one crawler meet
here instead of in module-level registries: :meth:`NeardupSession.of` returns the crawler's
session (kept as the crawler's ``neardup`` attribute), building it on first use. It holds

- the crawl's :class:`~crawler.config.CrawlConfig` (read and validated once) and its extractor;
- the :class:`~crawler.links.LinkScheduler` (the pages awaiting decisions, their held
  requests, the released links);
- the publisher (the :class:`~crawler.pipelines.KafkaPagePipeline`, registered by itself);
- the crawl's seen set (:class:`~crawler.seen.CrawlSeen`), connected on first use and closed
  when the engine stops, after every user;
- the page extracted from each HTML response (:meth:`page_of`), for the spider's callback;
- the crawl's URL rules once the spider opened (``rules``, :mod:`crawler.rules_setup`; None
  with ``NEARDUP_RULES=false`` or before the extension installed them).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol
from weakref import WeakKeyDictionary

from scrapy import signals
from scrapy.utils.misc import load_object

from crawler.config import ConfigError, crawl_config, default_crawl_id
from crawler.extractors import load_extractor
from crawler.links import LinkScheduler
from crawler.seen import CrawlSeen, MemorySeenStore, SeenStore
from crawler.seen_redis import RedisSeenStore
from crawler.sharing import WorkSharing
from crawler.sharing_redis import RedisPeerStore, journal_key
from dedup_worker.contract.messages import Page
from dedup_worker.contract.predictions import PredictedDuplicate

if TYPE_CHECKING:
    from collections.abc import Mapping

    from crawler.rules_setup import InstalledRules

logger = logging.getLogger(__name__)

#: The crawler attribute that holds its session.
ATTRIBUTE = "neardup"


class PagePublisher(Protocol):
    async def publish(self, page: Page) -> bool:
        """Publish a page; False if it was not (too large, publisher closed)."""
        ...

    def publish_prediction(self, prediction: PredictedDuplicate) -> None:
        """Publish a URL skipped by rule (``NEARDUP_PREDICTIONS_TOPIC``), without waiting."""
        ...


class NeardupSession:
    """The neardup state of one crawler (see the module docstring)."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self.config = crawl_config(crawler.settings)
        self.extractor = load_extractor(self.config.extractor)
        self.links = LinkScheduler(crawler, self.config, self.seen)
        self.publisher: PagePublisher | None = None
        self.rules: InstalledRules | None = None
        self._pages: WeakKeyDictionary[Any, Page] = WeakKeyDictionary()
        self._seen: CrawlSeen | None = None
        self._components_checked = False

    @classmethod
    def of(cls, crawler: Any) -> NeardupSession:
        """The crawler's session, built (and its settings validated) on first use."""
        session = getattr(crawler, ATTRIBUTE, None)
        if session is None:
            session = cls(crawler)
            setattr(crawler, ATTRIBUTE, session)
        if not isinstance(session, NeardupSession):
            raise ConfigError(f"the crawler's {ATTRIBUTE!r} attribute is taken by {session!r}")
        return session

    # ---- pages of responses -----------------------------------------------------------------

    def page_of(self, response: Any) -> Page | None:
        """The page the spider middleware extracted from ``response`` (None: not HTML, or
        extraction failed, or the middleware is not enabled)."""
        return self._pages.get(response)

    def remember_page(self, response: Any, page: Page) -> None:
        self._pages[response] = page

    # ---- the seen set -----------------------------------------------------------------------

    def seen(self) -> CrawlSeen:
        """The crawl's seen set, connected on first use (the spider must exist)."""
        if self._seen is None:
            drop = self.config.extract_options.drop_params  # as the outlinks are canonical
            self._seen = CrawlSeen(self._build_store(), drop_params=drop)
            # Closed when the engine stops, after every user (filter, extension, handler).
            self.crawler.signals.connect(self._close_seen, signal=signals.engine_stopped)
        return self._seen

    def _close_seen(self) -> None:
        seen, self._seen = self._seen, None
        if seen is not None:
            seen.close()

    def crawl_id(self) -> str:
        """``NEARDUP_CRAWL_ID``, else derived from the spider's seeds (or start URLs, or
        name): processes started the same way share one crawl."""
        if self.config.crawl_id:
            return self.config.crawl_id
        spider = self.crawler.spider
        seeds = getattr(spider, "seeds", None) or getattr(spider, "start_urls", None) or []
        return default_crawl_id(list(seeds) or [f"spider:{spider.name}"])

    def _build_store(self) -> SeenStore:
        config = self.config
        if not config.shared_seen:
            logger.info("URL-seen filter in process memory (no NEARDUP_REDIS_URL)")
            return MemorySeenStore()
        crawl_id = self.crawl_id()
        store = RedisSeenStore.from_url(
            config.redis_url, crawl_id, config.redis_security, cluster=config.redis_cluster
        )
        size = store.size()
        self.crawler.stats.set_value("dedup/seen_at_start", size)  # a resumed crawl: > 0
        logger.info(
            "URL-seen filter in Redis, crawl id %r (key %s): %d URLs already seen%s",
            crawl_id,
            store.key,
            size,
            " - resuming" if size else "",
        )
        return store

    def open_sharing(
        self, left_by: str = "", queue_kept: bool = True, killed: str = ""
    ) -> WorkSharing | None:
        """The crawl's work sharing between its processes (:mod:`crawler.sharing`), handed to
        the link scheduler; None without Redis or with ``NEARDUP_SHARE_WORK`` off. ``left_by``:
        the process whose journal the ``JOBDIR`` this crawl resumes kept (its resume file
        says which), adopted before this process journals anything; or, when Scrapy's queue
        there was discarded (``crawler.jobdir``), handed back to the crawl to take over, and
        so is the journal of the ``killed`` run that marked the ``JOBDIR`` (adopted by it,
        before it ever beat: then nobody knew it)."""
        config = self.config
        if not (config.share_work and config.shared_seen):
            return None
        store = RedisPeerStore.from_url(
            config.redis_url, self.crawl_id(), config.redis_security, cluster=config.redis_cluster
        )
        seen = self.seen()
        # The requests this process claims are journaled in Redis, for the crawl to take over
        # if it is killed. A JOBDIR crawl journals too: Scrapy writes its queue's state only
        # as it closes, so a kill lost that queue (kept for its resume when it closes well).
        journaling = isinstance(seen.store, RedisSeenStore)
        self.links.sharing = sharing = WorkSharing(
            store,
            fingerprint=(lambda r: seen.fingerprint(r.url, r.method, r.body))
            if journaling
            else None,
        )
        if isinstance(seen.store, RedisSeenStore):
            if left_by and queue_kept:
                adopted = store.adopt(sharing.token, left_by)
                logger.info("took up the journal of the run this JOBDIR resumes: %d requests "
                            "it owed", adopted)  # fmt: skip
            else:
                for token in {left_by, killed} - {""}:
                    store.hand_back(token)
            seen.store.journal(journal_key(self.crawl_id(), sharing.token))
        return sharing

    # ---- wiring -----------------------------------------------------------------------------

    def check_components(self) -> None:
        """With publishing on, every neardup component must be enabled: a page published
        without the extension would never be decided, requests held without the pipeline
        never published. Checked once, from the settings, when the first component is built."""
        if self._components_checked:
            return
        self._components_checked = True
        missing = missing_components(self.crawler.settings)
        if missing:
            raise ConfigError(
                "neardup needs these settings too (see README, 'Add neardup to your Scrapy "
                "project'): " + "; ".join(missing)
            )


#: (setting, the entry it needs, our class path) of every component of the plug-in.
REQUIRED: tuple[tuple[str, str, str], ...] = (
    ("SPIDER_MIDDLEWARES", "crawler.middleware.NeardupSpiderMiddleware", "100"),
    ("ITEM_PIPELINES", "crawler.pipelines.KafkaPagePipeline", "300"),
    ("EXTENSIONS", "crawler.scheduling.DecisionScheduler", "500"),
)
HANDLER = "crawler.download_handler.CancellableDownloadHandler"


def missing_components(settings: Any) -> list[str]:
    """What the settings lack, as the lines to add."""
    missing = []
    for name, path, order in REQUIRED:
        enabled = _enabled(settings.getwithbase(name))
        if not any(_is_subclass(entry, path) for entry in enabled):
            missing.append(f'{name} = {{"{path}": {order}}}')
    handlers = settings.getwithbase("DOWNLOAD_HANDLERS")
    for scheme in ("http", "https"):
        if not _is_subclass(handlers.get(scheme), HANDLER):
            missing.append(f'DOWNLOAD_HANDLERS["{scheme}"] = "{HANDLER}"')
    return missing


def _enabled(components: Mapping[Any, Any]) -> list[Any]:
    return [path for path, order in components.items() if order is not None]


def _is_subclass(entry: Any, path: str) -> bool:
    if entry is None:
        return False
    try:
        found = load_object(entry) if isinstance(entry, str) else entry
        return isinstance(found, type) and issubclass(found, load_object(path))
    except (ImportError, NameError, ValueError):
        return False
