"""Two spider styles, unchanged by neardup: a CrawlSpider with rules, a plain callback spider."""
