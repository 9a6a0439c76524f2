"""Crawler side of neardup: pure page extraction (:mod:`crawler.extract`) and URL
canonicalisation (:mod:`crawler.urls`), kept free of Scrapy, Kafka and Redis so they can be
tested and benchmarked on their own."""
