"""Scrapy settings of the ``neardup`` crawl (``scrapy.cfg`` points here).

Polite by default: robots.txt obeyed, AutoThrottle on, a few requests per host at a time.
``NEARDUP_*`` values come from the environment (see :mod:`crawler.config`); any setting can be
overridden with ``scrapy crawl neardup -s NAME=VALUE``.
"""

from __future__ import annotations

BOT_NAME = "neardup"
SPIDER_MODULES = ["crawler.spider"]
NEWSPIDER_MODULE = "crawler"
USER_AGENT = "neardup-crawler/0.1 (+https://github.com/neardup/neardup)"

# ---- politeness and fetching -----------------------------------------------------------------
ROBOTSTXT_OBEY = True
CONCURRENT_REQUESTS = 32
CONCURRENT_REQUESTS_PER_DOMAIN = 8
DOWNLOAD_DELAY = 0.0
AUTOTHROTTLE_ENABLED = True
AUTOTHROTTLE_START_DELAY = 0.5
AUTOTHROTTLE_MAX_DELAY = 30.0
AUTOTHROTTLE_TARGET_CONCURRENCY = 4.0
DOWNLOAD_TIMEOUT = 30
DOWNLOAD_MAXSIZE = 10 * 1024 * 1024
DOWNLOAD_WARNSIZE = 2 * 1024 * 1024
RETRY_ENABLED = True
RETRY_TIMES = 2
REDIRECT_ENABLED = True
REDIRECT_MAX_TIMES = 10
# Breadth-first within a priority: decision priorities already rank pages by novelty and depth.
SCHEDULER_DISK_QUEUE = "scrapy.squeues.PickleFifoDiskQueue"
SCHEDULER_MEMORY_QUEUE = "scrapy.squeues.FifoMemoryQueue"
# One item per response: Scrapy starts CONCURRENT_ITEMS asyncio tasks per response (100 by
# default), which cost more than extracting the page.
CONCURRENT_ITEMS = 4
# Session cookies would make one crawler see per-session page variants; a crawler needs none.
COOKIES_ENABLED = False
# No control ports: the crawl is driven by its arguments and the decisions topic.
TELNETCONSOLE_ENABLED = False
REMOTE_CONTROL_ENABLED = False
LOG_LEVEL = "INFO"

# ---- neardup components (the same lines add neardup to any Scrapy project) --------------------
SPIDER_MIDDLEWARES = {"crawler.middleware.NeardupSpiderMiddleware": 100}
ITEM_PIPELINES = {"crawler.pipelines.KafkaPagePipeline": 300}
EXTENSIONS = {"crawler.scheduling.DecisionScheduler": 500}
DUPEFILTER_CLASS = "crawler.dupefilter.SeenFilter"
# Scrapy's HTTP/1.1 handler plus a last-moment check for links cancelled by a correction.
DOWNLOAD_HANDLERS = {
    "http": "crawler.download_handler.CancellableDownloadHandler",
    "https": "crawler.download_handler.CancellableDownloadHandler",
}
# NEARDUP_* options come from the environment or -s NAME=VALUE (see crawler.config).
