"""Crawler side of neardup.

Pure parts, free of Scrapy, Kafka and Redis so they can be tested and benchmarked on their own:
page extraction (:mod:`crawler.extract`), URL canonicalisation (:mod:`crawler.urls`), the
bookkeeping of pages, decisions and held requests (:mod:`crawler.frontier`,
:mod:`crawler.judging`), URL rules (:mod:`crawler.rules`). Around them, one module per Scrapy
component (:mod:`crawler.middleware`, :mod:`crawler.pipelines`, :mod:`crawler.scheduling`,
:mod:`crawler.dupefilter`, :mod:`crawler.download_handler`) sharing one
:class:`~crawler.session.NeardupSession` per crawler, and the ``neardup`` spider
(:mod:`crawler.spider`)."""
