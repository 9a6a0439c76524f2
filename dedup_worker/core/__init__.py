"""The pure near-duplicate core: text features, simhash, table designs, index, batch mode.

Nothing under this package imports Kafka, Redis or Scrapy.
"""
